"""oci_layer (files -> tar), and the outputs every layer rule shares (tools/oci/debian, tools/oci/python)."""

load(":providers.bzl", "OciLayerInfo")

def layer_outputs(ctx):
    """The three files of a layer rule: <name>.tar, .descriptor.json, .contents.json."""
    return struct(
        tar = ctx.actions.declare_file(ctx.label.name + ".tar"),
        descriptor = ctx.actions.declare_file(ctx.label.name + ".descriptor.json"),
        contents = ctx.actions.declare_file(ctx.label.name + ".contents.json"),
    )

def layer_return(out):
    """DefaultInfo + OciLayerInfo of layer_outputs' files."""
    return [
        DefaultInfo(files = depset([out.tar, out.descriptor, out.contents])),
        OciLayerInfo(blob = out.tar, descriptor = out.descriptor, contents = out.contents),
    ]

def _relative(f, strip_prefix):
    path = f.short_path
    if path.startswith("../"):
        path = path.split("/", 2)[2]  # external repository: drop ../<repo>/
    if strip_prefix:
        prefix = strip_prefix.rstrip("/") + "/"
        if not path.startswith(prefix):
            fail("%s is not under strip_prefix %r" % (f.short_path, strip_prefix))
        path = path[len(prefix):]
    return path

def _oci_layer_impl(ctx):
    out = layer_outputs(ctx)
    package_dir = ctx.attr.package_dir.strip("/")
    files, trees = [], []
    for f in ctx.files.srcs:
        dst = _relative(f, ctx.attr.strip_prefix)
        dst = package_dir + "/" + dst if package_dir else dst
        if f.is_directory:
            trees.append({"src": f.path, "dst": dst})
        else:
            files.append({"src": f.path, "dst": dst, "mode": 493 if dst in ctx.attr.executables else None})
    spec = ctx.actions.declare_file(ctx.label.name + ".spec.json")
    ctx.actions.write(spec, json.encode({
        "created_by": "oci_layer %s" % ctx.label,
        "files": files,
        "trees": trees,
        "dirs": [{"dst": d, "mode": None} for d in ctx.attr.empty_dirs],
        "symlinks": [{"dst": k, "target": v} for k, v in ctx.attr.symlinks.items()],
        "compile": [package_dir] if ctx.attr.compile_python else [],
    }))
    ctx.actions.run(
        executable = ctx.executable._layer,
        arguments = ["build", "--spec", spec.path, "--out", out.tar.path, "--out-descriptor", out.descriptor.path, "--out-contents", out.contents.path],
        inputs = ctx.files.srcs + [spec],
        outputs = [out.tar, out.descriptor, out.contents],
        mnemonic = "OciLayer",
        progress_message = "Writing layer %s" % ctx.label,
    )
    return layer_return(out)

oci_layer = rule(
    implementation = _oci_layer_impl,
    doc = """A deterministic uncompressed tar layer from files (like rules_pkg's pkg_tar, fewer knobs).

Paths: package_dir + (workspace path of each file minus strip_prefix). Files get mode 0644
(0755 if listed in `executables`), directories 0755, mtime 0, uid/gid 0.""",
    attrs = {
        "srcs": attr.label_list(allow_files = True),
        "strip_prefix": attr.string(doc = "workspace-relative prefix removed from each file's path"),
        "package_dir": attr.string(doc = "directory in the image the files go under"),
        "executables": attr.string_list(doc = "layer paths that get mode 0755"),
        "empty_dirs": attr.string_list(),
        "symlinks": attr.string_dict(doc = "layer path -> link target"),
        "compile_python": attr.bool(doc = "add unchecked-hash .pyc for the .py files (CPython 3.11)"),
        "_layer": attr.label(default = "//tools/oci:layer", executable = True, cfg = "exec"),
    },
)
