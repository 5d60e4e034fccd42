"""Public API of the OCI rules (modeled on rules_oci / rules_img; see tools/oci/README.md).

    load("//tools/oci:defs.bzl", "oci_image", "oci_layer", "oci_layout", "engine_image", ...)

Images are small layouts (manifest + config + embedded blobs) whose big layer blobs stay the
outputs of the layer targets, so an image action never copies or re-hashes its base.
"""

load("//tools/oci/private:engine.bzl", _engine_patch_layer = "engine_patch_layer", _oci_structure_test = "oci_structure_test", _recipe_fingerprint = "recipe_fingerprint")
load("//tools/oci/private:image.bzl", _oci_image_rule = "oci_image_rule", _oci_layout = "oci_layout")
load("//tools/oci/private:layers.bzl", _debian_rootfs_layer = "debian_rootfs_layer", _oci_layer = "oci_layer", _python_wheels_layer = "python_wheels_layer")
load("//tools/oci/private:providers.bzl", _LockModeInfo = "LockModeInfo", _OciImageInfo = "OciImageInfo", _OciLayerInfo = "OciLayerInfo", _layer_args = "layer_args", _layer_blobs = "layer_blobs")
load("//tools/oci/private:run.bzl", _oci_load = "oci_load", _oci_validate_test = "oci_validate_test", _oci_view = "oci_view")
load("//tools/oci/private:settings.bzl", _lock_mode_flag = "lock_mode_flag")

OciImageInfo = _OciImageInfo
OciLayerInfo = _OciLayerInfo
LockModeInfo = _LockModeInfo
layer_args = _layer_args
layer_blobs = _layer_blobs
oci_layer = _oci_layer
oci_layout = _oci_layout
oci_structure_test = _oci_structure_test
debian_rootfs_layer = _debian_rootfs_layer
python_wheels_layer = _python_wheels_layer
lock_mode_flag = _lock_mode_flag
oci_view = _oci_view
oci_load = _oci_load
oci_validate_test = _oci_validate_test

# Manifest annotation holding the recipe fingerprint (tools/release/fingerprint.py).
FINGERPRINT_ANNOTATION = "ai.glm53.recipe.fingerprint"

def oci_image(name, base = None, tars = [], env = {}, entrypoint = None, cmd = None, labels = {}, annotations = {}, user = None, workdir = None, exposed_ports = [], **kwargs):
    """An OCI image: base (or scratch) + tars, like rules_oci's oci_image.

    Outputs <name>/ (OCI layout: index.json, oci-layout, manifest and config blobs; layer blobs
    stay with the layer targets, see OciImageInfo.layers) and <name>.digest ('sha256:<hex>\\n').
    `entrypoint`/`cmd` None = inherit from base; env values may use $KEY of the base env.

    Args:
      name: target name (also the index.json ref name unless ref_name is given).
      base: an oci_image (or anything providing OciImageInfo).
      tars: layer targets (oci_layer, debian_rootfs_layer, ...) or uncompressed .tar files.
      env: dict of env vars.
      entrypoint: list of strings, or None to inherit.
      cmd: list of strings, or None to inherit.
      labels: dict of config labels.
      annotations: dict of manifest annotations.
      user: config User, None to inherit.
      workdir: config WorkingDir, None to inherit.
      exposed_ports: list like ["30000/tcp"].
      **kwargs: image_name, ref_name, embed_layers, label_files, label_from_files, visibility, tags...
    """
    _oci_image_rule(
        name = name,
        base = base,
        tars = tars,
        env = env,
        labels = labels,
        annotations = annotations,
        entrypoint_json = json.encode(entrypoint) if entrypoint != None else "",
        cmd_json = json.encode(cmd) if cmd != None else "",
        user = user or "",
        workdir = workdir or "",
        exposed_ports = exposed_ports,
        **kwargs
    )

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
      recipe: directory name under /usr/share/glm53-engine/ (default: name).
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
    _engine_patch_layer(name = layer, chain = chain, tests = tests, recipe = recipe, site = site, visibility = visibility, tags = tags)
    all_labels = {}
    for key, value in [("source", source), ("revision", revision), ("documentation", documentation)]:
        if value:
            all_labels["org.opencontainers.image." + key] = value
    all_labels.update(labels)
    _recipe_fingerprint(name = name + ".fingerprint", chain = chain, base = base, visibility = visibility, tags = tags)
    _oci_image_rule(
        name = name,
        base = base,
        tars = [":" + layer],
        labels = all_labels,
        label_files = [":%s.labels" % layer],
        annotation_from_files = {":%s.fingerprint" % name: FINGERPRINT_ANNOTATION},
        embed_layers = True,
        visibility = visibility,
        tags = tags,
    )
    _oci_layout(name = name + ".layout", image = ":" + name, visibility = visibility, tags = tags + ["manual"])
    _oci_view(name = name + ".view", image = ":" + name, visibility = visibility, tags = tags)
    _oci_load(name = name + ".load", image = ":" + name, visibility = visibility, tags = tags)
    _oci_validate_test(
        name = name + "_oci_validate_test",
        image = ":" + name,
        # oci-image-tool hashes every blob (2 GiB): ~18 s here, 35 s on a busy machine.
        size = "medium",
        # 2 GiB of base layer runfiles: never worth uploading to a remote executor.
        tags = tags + ["no-remote"],
    )
    _oci_structure_test(
        name = name + "_structure_test",
        image = ":" + name,
        base = base,
        chain = chain,
        recipe = recipe,
        site = site,
        expect_labels = all_labels,
        expect_label_files = [":%s.labels" % layer],
        tags = tags,
        size = "small",
    )
