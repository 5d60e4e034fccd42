"""WORKSPACE API: a registry image pinned by digest, as a base for oci_image / engine_image.

    load("//tools/oci:pull.bzl", "oci_pull")
    oci_pull(
        name = "sglang_prod_base",
        registry = "docker.io",
        repository = "lmsysorg/sglang",
        digest = "sha256:<64 hex>",                          # a manifest or a multi-platform index
        scan = ["usr/lib/python3/dist-packages/sglang"],     # optional: hash these files at fetch time
        expect = "//recipes:prod_base_expect",               # optional: files (path, sha256) the base must hold
    )

The repository rule runs tools/oci/pull.py with the registered Python toolchain's interpreter
and Debian's skopeo (both declared paths; `./tools/bazel` installs them): manifest (for an
index, the platform's manifest) and config by `skopeo inspect --raw`, each verified by sha256;
with `scan`, the layers are copied once into a scratch directory, hashed and deleted.
`@<name>//:image` provides OciImageInfo with every layer shallow (no blob), so images build on
it reading descriptors only; with `expect`, every build on it first checks the files.
Modeled on rules_oci's `oci_pull` and rules_img's shallow pull.
"""

load("//tools/oci/private:pull.bzl", _oci_pull = "oci_pull", _shallow_base = "shallow_base")

oci_pull = _oci_pull

# Used by the BUILD file oci_pull generates.
shallow_base = _shallow_base
