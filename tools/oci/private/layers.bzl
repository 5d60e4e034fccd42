"""Layer rules: files -> tar (oci_layer), Debian runtime (debian_rootfs_layer), wheels (python_wheels_layer)."""

load(":providers.bzl", "LockModeInfo", "OciLayerInfo")

def _layer_outputs(ctx):
    return struct(
        tar = ctx.actions.declare_file(ctx.label.name + ".tar"),
        descriptor = ctx.actions.declare_file(ctx.label.name + ".descriptor.json"),
        contents = ctx.actions.declare_file(ctx.label.name + ".contents.json"),
    )

def _layer_return(out):
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
    out = _layer_outputs(ctx)
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
    return _layer_return(out)

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

def _debian_rootfs_layer_impl(ctx):
    out = _layer_outputs(ctx)
    mode = ctx.attr.lock_mode[LockModeInfo].mode
    args = ctx.actions.args()
    args.add("build")
    args.add_all(ctx.attr.packages, before_each = "--root-pkg")
    args.add_all(ctx.attr.exclude, before_each = "--exclude")
    args.add("--lock", ctx.file.lock)
    args.add_all(ctx.files.debs, before_each = "--deb")
    args.add("--mode", mode)
    args.add("--out", out.tar)
    args.add("--out-descriptor", out.descriptor)
    args.add("--out-manifest", out.contents)

    # Sandboxed, no network, remote-executable: every input is a declared file (the resolved
    # lock and the .debs the repository rule downloaded with their sha256).
    ctx.actions.run(
        executable = ctx.executable._debroot,
        arguments = [args],
        inputs = ctx.files.debs + [ctx.file.lock],
        outputs = [out.tar, out.descriptor, out.contents],
        mnemonic = "DebianRootfs",
        progress_message = "Assembling the Debian runtime layer %s from %d .debs (%s lock)" % (ctx.label, len(ctx.files.debs), mode),
    )
    return _layer_return(out)

debian_rootfs_layer = rule(
    implementation = _debian_rootfs_layer_impl,
    doc = """A distroless-style Debian runtime layer from .debs (tools/oci/debroot.py).

`lock` and `debs` come from the lock's debian_packages repository (tools/oci/deb.bzl):
`@<repo>//:resolved.lock` and `@<repo>//:debs`.""",
    attrs = {
        "lock": attr.label(allow_single_file = True, mandatory = True, doc = "the resolved lock (@<repo>//:resolved.lock)"),
        "debs": attr.label_list(allow_files = [".deb"], mandatory = True, doc = "the lock's .debs (@<repo>//:debs)"),
        "packages": attr.string_list(mandatory = True, doc = "roots of the closure (must match the lock's)"),
        "exclude": attr.string_list(doc = "closure members not installed (needed only by maintainer scripts)"),
        "lock_mode": attr.label(mandatory = True, providers = [LockModeInfo], doc = "strict: refuse a drifted resolved lock"),
        "_debroot": attr.label(default = "//tools/oci:debroot", executable = True, cfg = "exec"),
    },
)

def _python_wheels_layer_impl(ctx):
    out = _layer_outputs(ctx)
    interpreter = ctx.attr.interpreter[OciLayerInfo].blob
    args = ctx.actions.args()
    args.add("--lock", ctx.file.lock)
    args.add_all(ctx.files.wheels, before_each = "--wheel")
    args.add_all(ctx.attr.prune, before_each = "--prune")
    args.add("--interpreter-layer", interpreter)
    args.add("--created-by", "python wheels %s (%d wheels from %s)" % (ctx.label, len(ctx.files.wheels), ctx.file.lock.short_path))
    args.add("--out", out.tar)
    args.add("--out-descriptor", out.descriptor)
    args.add("--out-manifest", out.contents)
    ctx.actions.run(
        executable = ctx.executable._pyroot,
        arguments = [args],
        # The interpreter layer is an input: the .pyc are compiled by the image's own CPython.
        inputs = ctx.files.wheels + [ctx.file.lock, interpreter],
        outputs = [out.tar, out.descriptor, out.contents],
        mnemonic = "PythonWheelsLayer",
        progress_message = "Installing %d locked wheels into layer %s" % (len(ctx.files.wheels), ctx.label),
        # GBs in and out: not worth shipping to a remote executor.
        execution_requirements = {"no-remote-exec": "1"},
    )
    providers = _layer_return(out)

    # The tar in runfiles too: tests take the layer as `data` (//recipes/bases:*_record_test).
    return [DefaultInfo(
        files = providers[0].files,
        runfiles = ctx.runfiles(files = [out.tar, out.contents]),
    )] + providers[1:]

python_wheels_layer = rule(
    implementation = _python_wheels_layer_impl,
    doc = """Hash-locked wheels installed into /usr/lib/python3/dist-packages by PyPA's installer,
streamed into the layer tar, byte-compiled by the image's CPython (tools/oci/pyroot.py).""",
    attrs = {
        "wheels": attr.label_list(allow_files = [".whl"], mandatory = True),
        "lock": attr.label(allow_single_file = True, mandatory = True),
        "prune": attr.string_list(doc = "paths under dist-packages to delete after install"),
        "interpreter": attr.label(
            mandatory = True,
            providers = [OciLayerInfo],
            doc = "the image's Debian runtime layer: its /usr/bin/python3 compiles the .pyc",
        ),
        "_pyroot": attr.label(default = "//tools/oci:pyroot", executable = True, cfg = "exec"),
    },
)
