"""Public API of the engine images: a base + ONE patch layer from a verified patch chain.

    load("//tools/engine:defs.bzl", "engine_image", "recipe_dir")

Built on the generic rules of //tools/oci:defs.bzl; see tools/engine/README.md.
"""

load("//tools/engine/private:engine.bzl", _RECIPES_DIR = "RECIPES_DIR", _engine_patch_layer = "engine_patch_layer", _engine_structure_test = "engine_structure_test", _recipe_dir = "recipe_dir", _recipe_fingerprint = "recipe_fingerprint")
load("//tools/oci:defs.bzl", "oci_image", "oci_layout", "oci_validate_test", "oci_view", "output_file")
load("//tools/podman:defs.bzl", "oci_load")

RECIPES_DIR = _RECIPES_DIR
recipe_dir = _recipe_dir
engine_structure_test = _engine_structure_test

# Manifest annotation holding the recipe fingerprint (tools/release/fingerprint.py).
FINGERPRINT_ANNOTATION = "ai.glm53.recipe.fingerprint"

def engine_image(
        name,
        base,
        chain,
        tests = [],
        recipe = None,
        labels = {},
        source = "",
        revision = "",
        documentation = "",
        site = "/usr/lib/python3/dist-packages",
        visibility = None,
        tags = []):
    """base + ONE patch layer (patched SGLang files, recipe, PROVENANCE, CPU tests).

    Targets:
      <name>                    the image (OCI layout dir) + <name>.digest
      <name>.patch_layer        the patch layer (+ .digest, .patches.json, .labels); base-independent
      <name>.layout             self-contained OCI layout (copies every blob; build on demand)
      <name>.view               bazel run -- DIR: full layout of symlinks in DIR
      <name>.load               bazel run: into podman's storage (or --format docker-archive --out F)
      <name>.fingerprint        the recipe fingerprint file (also a manifest annotation)
      <name>_structure_test     daemon-free structure test
      <name>_oci_validate_test  oci-image-tool validate on the full view

    Labels: org.opencontainers.image.{source,revision,documentation} from the arguments,
    .base.name/.base.digest from the base, one ai.glm53.patch.<name>=<version>[-<activation>]
    per patch of the chain. Entrypoint, cmd and env are inherited from the base. Manifest
    annotations: .base.name/.base.digest and ai.glm53.recipe.fingerprint.

    Args:
      name: target name, e.g. glm53_v3.
      base: image providing OciImageInfo.
      chain: a patch_chain target (PatchChainInfo).
      tests: the series' CPU test files (e.g. //patches:v3_tests).
      recipe: directory name under RECIPES_DIR (default: name).
      labels: extra labels.
      source: org.opencontainers.image.source.
      revision: org.opencontainers.image.revision (not stamped: a fixed string keeps digests stable).
      documentation: org.opencontainers.image.documentation.
      site: directory holding sglang/ in the base.
      visibility: visibility of the targets.
      tags: tags of the targets.
    """
    recipe = recipe or name
    layer = name + ".patch_layer"
    common = {"visibility": visibility, "tags": tags}
    _engine_patch_layer(name = layer, chain = chain, tests = tests, recipe = recipe, site = site, **common)
    output_file(layer + ".digest", layer, "digest", **common)
    output_file(layer + ".patches.json", layer, "patches", **common)
    output_file(layer + ".labels", layer, "labels", **common)
    all_labels = {}
    for key, value in [("source", source), ("revision", revision), ("documentation", documentation)]:
        if value:
            all_labels["org.opencontainers.image." + key] = value
    all_labels.update(labels)
    _recipe_fingerprint(name = name + ".fingerprint", chain = chain, base = base, **common)
    oci_image(
        name = name,
        base = base,
        tars = [":" + layer],
        labels = all_labels,
        label_files = [":%s.labels" % layer],
        annotation_from_files = {":%s.fingerprint" % name: FINGERPRINT_ANNOTATION},
        embed_layers = True,
        **common
    )
    oci_layout(name = name + ".layout", image = ":" + name, visibility = visibility, tags = tags + ["manual"])
    oci_view(name = name + ".view", image = ":" + name, **common)
    oci_load(name = name + ".load", image = ":" + name, **common)
    oci_validate_test(
        name = name + "_oci_validate_test",
        image = ":" + name,
        # oci-image-tool hashes every blob (2 GiB): ~18 s here, 35 s on a busy machine.
        size = "medium",
        # 2 GiB of base layer runfiles: never worth uploading to a remote executor.
        tags = tags + ["no-remote-exec"],
        visibility = visibility,
    )
    _engine_structure_test(
        name = name + "_structure_test",
        image = ":" + name,
        base = base,
        chain = chain,
        recipe = recipe,
        site = site,
        expect_labels = all_labels,
        expect_label_files = [":%s.labels" % layer],
        size = "small",
        **common
    )
