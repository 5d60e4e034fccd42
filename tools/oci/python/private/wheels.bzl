"""python_wheels_layer: hash-locked wheels installed into a layer."""

load("//tools/oci:defs.bzl", "OciLayerInfo")
load("//tools/oci:internal.bzl", "layer_outputs", "layer_return")

def _python_wheels_layer_impl(ctx):
    out = layer_outputs(ctx)
    interpreter = ctx.attr.interpreter[OciLayerInfo].blob
    args = ctx.actions.args()
    args.add("--lock", ctx.file.lock)
    args.add_all(ctx.files.wheels, before_each = "--wheel")
    args.add_all(ctx.attr.prune, before_each = "--prune")
    inputs = ctx.files.wheels + [ctx.file.lock, interpreter]
    if (ctx.attr.part == "all") != (ctx.file.shared_with == None):
        fail("part = \"shared\" or \"own\" needs shared_with (the other base's lock), and shared_with needs one of them", attr = "part")
    if ctx.file.shared_with:
        args.add("--part", ctx.attr.part)
        args.add("--shared-with", ctx.file.shared_with)
        inputs.append(ctx.file.shared_with)
    args.add("--interpreter-layer", interpreter)
    what = "%d wheels" % len(ctx.files.wheels) if ctx.attr.part == "all" else "the wheels %s with %s" % (ctx.attr.part, ctx.file.shared_with.short_path)
    args.add("--created-by", "python wheels %s (%s from %s)" % (ctx.label, what, ctx.file.lock.short_path))
    args.add("--out", out.tar)
    args.add("--out-descriptor", out.descriptor)
    args.add("--out-manifest", out.contents)
    ctx.actions.run(
        executable = ctx.executable._pyroot,
        arguments = [args],
        # The interpreter layer is an input: the .pyc are compiled by the image's own CPython.
        inputs = inputs,
        outputs = [out.tar, out.descriptor, out.contents],
        mnemonic = "PythonWheelsLayer",
        progress_message = "Installing the locked wheels (%s) into layer %s" % (ctx.attr.part, ctx.label),
        # GBs in and out: not worth shipping to a remote executor.
        execution_requirements = {"no-remote-exec": "1"},
    )
    providers = layer_return(out)

    # The tar in runfiles too: tests take the layer as `data` (//recipes/bases:*_record_test).
    return [DefaultInfo(
        files = providers[0].files,
        runfiles = ctx.runfiles(files = [out.tar, out.contents]),
    )] + providers[1:]

python_wheels_layer = rule(
    implementation = _python_wheels_layer_impl,
    doc = """Hash-locked wheels installed into /usr/lib/python3/dist-packages by PyPA's installer,
streamed into the layer tar, byte-compiled by the image's CPython (tools/oci/python/pyroot.py).""",
    attrs = {
        "wheels": attr.label_list(allow_files = [".whl"], mandatory = True),
        "lock": attr.label(allow_single_file = True, mandatory = True),
        "prune": attr.string_list(doc = "paths under dist-packages to delete after install"),
        "part": attr.string(
            default = "all",
            values = ["all", "shared", "own"],
            doc = "shared: only the wheels shared_with also locks (same sha256); own: the rest of lock",
        ),
        "shared_with": attr.label(
            allow_single_file = True,
            doc = "the other base's lock, for part = shared or own",
        ),
        "interpreter": attr.label(
            mandatory = True,
            providers = [OciLayerInfo],
            doc = "the image's Debian runtime layer: its /usr/bin/python3 compiles the .pyc",
        ),
        "_pyroot": attr.label(default = "//tools/oci/python:pyroot", executable = True, cfg = "exec"),
    },
)
