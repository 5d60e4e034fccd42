"""debian_rootfs_layer: a distroless-style runtime layer from locked .debs."""

load("//tools/oci:internal.bzl", "layer_outputs", "layer_return")
load(":settings.bzl", "LockModeInfo")

def _debian_rootfs_layer_impl(ctx):
    out = layer_outputs(ctx)
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
    return layer_return(out)

debian_rootfs_layer = rule(
    implementation = _debian_rootfs_layer_impl,
    doc = """A distroless-style Debian runtime layer from .debs (tools/oci/debian/debroot.py).

`lock` and `debs` come from the lock's debian_packages repository (tools/oci/debian/repositories.bzl):
`@<repo>//:resolved.lock` and `@<repo>//:debs`.""",
    attrs = {
        "lock": attr.label(allow_single_file = True, mandatory = True, doc = "the resolved lock (@<repo>//:resolved.lock)"),
        "debs": attr.label_list(allow_files = [".deb"], mandatory = True, doc = "the lock's .debs (@<repo>//:debs)"),
        "packages": attr.string_list(mandatory = True, doc = "roots of the closure (must match the lock's)"),
        "exclude": attr.string_list(doc = "closure members not installed (needed only by maintainer scripts)"),
        "lock_mode": attr.label(mandatory = True, providers = [LockModeInfo], doc = "strict: refuse a drifted resolved lock"),
        "_debroot": attr.label(default = "//tools/oci/debian:debroot", executable = True, cfg = "exec"),
    },
)
