"""oci_image (modeled on rules_oci's) and oci_layout (a self-contained copy)."""

load(":providers.bzl", "OciImageInfo", "OciLayerInfo", "layer_args")

def _own_layers(ctx):
    layers = []
    for i, t in enumerate(ctx.attr.tars):
        if OciLayerInfo in t:
            layers.append(t[OciLayerInfo])
            continue
        for f in t.files.to_list():
            if not f.basename.endswith(".tar"):
                fail("%s: tars takes layer targets or uncompressed .tar files, got %s" % (ctx.label, f.short_path))
            desc = ctx.actions.declare_file("%s.layers/%d_%s.descriptor.json" % (ctx.label.name, i, f.basename))
            ctx.actions.run(
                executable = ctx.executable._layer,
                arguments = ["describe", "--tar", f.path, "--out-descriptor", desc.path, "--created-by", "tar %s" % f.short_path],
                inputs = [f],
                outputs = [desc],
                mnemonic = "OciDescribeLayer",
            )
            layers.append(OciLayerInfo(blob = f, descriptor = desc, contents = None))
    return layers

def _oci_image_impl(ctx):
    base = ctx.attr.base[OciImageInfo] if ctx.attr.base else None
    own = _own_layers(ctx)
    layout = ctx.actions.declare_directory(ctx.label.name)
    manifest = ctx.actions.declare_file(ctx.label.name + ".manifest.json")
    config = ctx.actions.declare_file(ctx.label.name + ".config.json")
    contents = ctx.actions.declare_file(ctx.label.name + ".contents.json")
    digest = ctx.actions.declare_file(ctx.label.name + ".digest")

    args = ctx.actions.args()
    inputs = []
    if base:
        args.add("--base", base.layout.path)
        args.add("--base-contents", base.contents)
        inputs += [base.layout, base.contents]
    for l in own:
        args.add("--layer", l.descriptor)
        args.add("--layer-contents", l.contents.path if l.contents else "-")
        inputs.append(l.descriptor)
        if l.contents:
            inputs.append(l.contents)
        if ctx.attr.embed_layers:
            args.add("--embed", "%s=%s" % (l.descriptor.path, l.blob.path))
            inputs.append(l.blob)
    for k, v in ctx.attr.env.items():
        args.add("--env", "%s=%s" % (k, v))
    for k, v in ctx.attr.labels.items():
        args.add("--label", "%s=%s" % (k, v))
    for f in ctx.files.label_files:
        args.add("--labels-file", f)
        inputs.append(f)
    for target, key in ctx.attr.label_from_files.items():
        f = target.files.to_list()[0]
        args.add("--label-from-file", "%s=%s" % (key, f.path))
        inputs.append(f)
    if ctx.attr.base_name_label and base:
        # The image spec defines these as manifest annotations; the config labels are what
        # `podman inspect` and docker show.
        for flag in ("--label", "--annotation"):
            args.add(flag, "org.opencontainers.image.base.name=%s" % base.image_name)
            args.add(flag + "-from-file", "org.opencontainers.image.base.digest=%s" % base.digest.path)
        inputs.append(base.digest)
    for k, v in ctx.attr.annotations.items():
        args.add("--annotation", "%s=%s" % (k, v))
    for target, key in ctx.attr.annotation_from_files.items():
        f = target.files.to_list()[0]
        args.add("--annotation-from-file", "%s=%s" % (key, f.path))
        inputs.append(f)
    if ctx.attr.entrypoint_json:
        args.add("--entrypoint", ctx.attr.entrypoint_json)
    if ctx.attr.cmd_json:
        args.add("--cmd", ctx.attr.cmd_json)
    if ctx.attr.user:
        args.add("--user", ctx.attr.user)
    if ctx.attr.workdir:
        args.add("--workdir", ctx.attr.workdir)
    args.add_all(ctx.attr.exposed_ports, before_each = "--exposed-port")
    args.add("--ref-name", ctx.attr.ref_name or ctx.label.name)
    args.add("--out-layout", layout.path)
    args.add("--out-digest", digest)
    args.add("--out-manifest", manifest)
    args.add("--out-config", config)
    args.add("--out-contents", contents)
    ctx.actions.run(
        executable = ctx.executable._image,
        arguments = [args],
        inputs = inputs,
        outputs = [layout, digest, manifest, config, contents],
        mnemonic = "OciImage",
        progress_message = "Assembling OCI image %s" % ctx.label,
    )
    layers = (base.layers if base else []) + own
    info = OciImageInfo(
        layout = layout,
        digest = digest,
        manifest = manifest,
        config = config,
        contents = contents,
        layers = layers,
        image_name = ctx.attr.image_name or str(ctx.label),
    )
    blobs = [l.blob for l in layers if l.blob != None]
    return [
        DefaultInfo(files = depset([layout, digest]), runfiles = ctx.runfiles(files = [layout, digest, manifest, config, contents])),
        info,
        OutputGroupInfo(
            digest = depset([digest]),
            blobs = depset(blobs),
            descriptors = depset([l.descriptor for l in layers]),
            metadata = depset([manifest, config, contents]),
        ),
    ]

oci_image_rule = rule(
    implementation = _oci_image_impl,
    doc = "See oci_image in //tools/oci:defs.bzl.",
    attrs = {
        "base": attr.label(providers = [OciImageInfo]),
        "tars": attr.label_list(allow_files = [".tar"], doc = "layers on top of base, in order (put rarely changing ones first)"),
        "env": attr.string_dict(doc = "values may use $KEY / ${KEY} of the base env"),
        "labels": attr.string_dict(),
        "label_files": attr.label_list(allow_files = True, doc = "files of KEY=VALUE label lines"),
        "label_from_files": attr.label_keyed_string_dict(allow_files = True, doc = "file -> label key; the value is the file's stripped content"),
        "base_name_label": attr.bool(default = True, doc = "add org.opencontainers.image.base.name/.base.digest from base (as labels and manifest annotations)"),
        "annotations": attr.string_dict(doc = "manifest annotations"),
        "annotation_from_files": attr.label_keyed_string_dict(allow_files = True, doc = "file -> manifest annotation key; the value is the file's stripped content"),
        "entrypoint_json": attr.string(doc = "JSON list; empty = inherit"),
        "cmd_json": attr.string(doc = "JSON list; empty = inherit"),
        "user": attr.string(),
        "workdir": attr.string(),
        "exposed_ports": attr.string_list(),
        "ref_name": attr.string(doc = "index.json ref name (default: the target name)"),
        "image_name": attr.string(doc = "name images built on this one record as their base.name"),
        "embed_layers": attr.bool(doc = "copy the blobs of `tars` into the layout directory (small layers only)"),
        "_layer": attr.label(default = "//tools/oci:layer", executable = True, cfg = "exec"),
        "_image": attr.label(default = "//tools/oci:image", executable = True, cfg = "exec"),
    },
)

def _path(f):
    return f.path

def _oci_layout_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    out = ctx.actions.declare_directory(ctx.label.name)
    missing = [l for l in image.layers if l.blob == None]
    if missing:
        fail("%s: %s has shallow layers (no blobs); a self-contained layout needs them pulled" % (ctx.label, ctx.attr.image.label))
    args = ctx.actions.args()
    args.add("--image", image.layout.path)
    args.add("--out", out.path)
    args.add("--mode", "copy")
    args.add_all(layer_args(image, _path), before_each = "--blob")
    ctx.actions.run(
        executable = ctx.executable._materialize,
        arguments = [args],
        inputs = [image.layout] + [l.descriptor for l in image.layers] + [l.blob for l in image.layers],
        outputs = [out],
        mnemonic = "OciLayout",
        progress_message = "Copying every blob of %s into one OCI layout" % ctx.attr.image.label,
        execution_requirements = {"no-remote-exec": "1"},
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

oci_layout = rule(
    implementation = _oci_layout_impl,
    doc = """A self-contained OCI image layout (every blob copied in) of an oci_image.

Costs a full copy of every layer (plus Bazel hashing the copy): build it only where a tool
needs one directory; tests and run targets can materialise with symlinks instead
(tools/oci/materialize.py --mode symlink).""",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "_materialize": attr.label(default = "//tools/oci:materialize", executable = True, cfg = "exec"),
    },
)
