"""Public API of the OCI rules (modeled on rules_oci / rules_img; see tools/oci/README.md).

    load("//tools/oci:defs.bzl", "oci_image", "oci_layer", "oci_layout", "oci_view", ...)

The layer producers are sub-packages: //tools/oci/debian:defs.bzl (debian_rootfs_layer,
debian_lock), //tools/oci/python:defs.bzl (python_wheels_layer); `.load` is
//tools/podman:defs.bzl's oci_load. Helpers for other areas' rules: internal.bzl.

Images are small layouts (manifest + config + embedded blobs) whose big layer blobs stay the
outputs of the layer targets, so an image action never copies or re-hashes its base. Generic:
what is specific to the engine images lives in //tools/engine:defs.bzl.
"""

load("//tools/oci/private:image.bzl", _oci_image_rule = "oci_image_rule", _oci_layout = "oci_layout")
load("//tools/oci/private:layers.bzl", _oci_layer = "oci_layer")
load("//tools/oci/private:providers.bzl", _OciImageInfo = "OciImageInfo", _OciLayerInfo = "OciLayerInfo")
load("//tools/oci/private:run.bzl", _oci_validate_test = "oci_validate_test", _oci_view = "oci_view")
load("//tools/oci/private:structure.bzl", _oci_structure_test = "oci_structure_test")

OciImageInfo = _OciImageInfo
OciLayerInfo = _OciLayerInfo
oci_layer = _oci_layer
oci_layout = _oci_layout
oci_structure_test = _oci_structure_test
oci_view = _oci_view
oci_validate_test = _oci_validate_test

def oci_image(name, base = None, tars = [], env = {}, entrypoint = None, cmd = None, labels = {}, annotations = {}, user = None, workdir = None, exposed_ports = [], **kwargs):
    """An OCI image: base (or scratch) + tars, like rules_oci's oci_image.

    Outputs <name>/ (OCI layout: index.json, oci-layout, manifest and config blobs; layer blobs
    stay with the layer targets, see OciImageInfo.layers) and <name>.digest ('sha256:<hex>\\n'),
    also the target <name>.digest.
    `entrypoint`/`cmd` None = inherit from base; env values may use $KEY of the base env.

    Args:
      name: target name (also the index.json ref name unless ref_name is given).
      base: an oci_image (or anything providing OciImageInfo).
      tars: layer targets (oci_layer, debian_rootfs_layer, python_wheels_layer, ...) or uncompressed .tar files.
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
    output_file(name + ".digest", name, "digest", visibility = kwargs.get("visibility"), tags = kwargs.get("tags", []))

def output_file(name, target, output_group, visibility = None, tags = []):
    """A label for one output group of a target (instead of a rule's deprecated `outputs`).

    Args:
      name: the new target, e.g. "glm53_v3.digest".
      target: the rule target in this package that has the output group.
      output_group: the OutputGroupInfo field, e.g. "digest".
      visibility: visibility of the new target.
      tags: tags of the new target.
    """
    native.filegroup(
        name = name,
        srcs = [":" + target],
        output_group = output_group,
        visibility = visibility,
        tags = tags,
    )
