"""Implementation of patch_series / patch_chain (public API: //tools/patches:defs.bzl)."""

PatchSeriesInfo = provider(
    doc = "A series declaration with its ancestors (root first) and every patch file of the chain.",
    fields = {
        "name": "the series name (its directory under patches/)",
        "declarations": "list of File: series.json of the chain, root first",
        "patches": "list of File: the .diff files of the chain",
        "package_files": "list of struct(dst, file): the files of the packages the chain ships, dst = <package>/<path>",
    },
)

PatchChainInfo = provider(
    doc = "A verified, applied patch series.",
    fields = {
        "series": "the series name, e.g. \"v3\"",
        "patched": "directory artifact holding only the touched files, at package-relative paths sglang/...",
        "provenance_json": "File: PROVENANCE.json",
        "provenance_text": "File: PROVENANCE (readable)",
        "declaration": "File: the resolved series declaration, parents included, as JSON",
    },
)

def _series_name(declaration):
    return declaration.dirname.split("/")[-1]

def _package_files(target):
    # engine/glm53_offload:files -> glm53_offload/<path>: paths below the package's parent directory.
    parent = target.label.package.rpartition("/")[0]
    prefix = parent + "/" if parent else ""
    out = []
    for f in target.files.to_list():
        if not f.short_path.startswith(prefix):
            fail("%s: %s is not below %s" % (target.label, f.short_path, prefix))
        out.append(struct(dst = f.short_path[len(prefix):], file = f))
    return out

def _patch_series_impl(ctx):
    parent = ctx.attr.extends[PatchSeriesInfo] if ctx.attr.extends else None
    declarations = (parent.declarations if parent else []) + [ctx.file.declaration]
    patches = (parent.patches if parent else []) + ctx.files.patches
    package_files = list(parent.package_files if parent else [])
    for package in ctx.attr.packages:
        package_files += _package_files(package)
    for p in ctx.files.patches:
        if p.dirname != ctx.file.declaration.dirname:
            fail("patch %s must sit next to its declaration %s" % (p.short_path, ctx.file.declaration.short_path))
    return [
        PatchSeriesInfo(
            name = _series_name(ctx.file.declaration),
            declarations = declarations,
            patches = patches,
            package_files = package_files,
        ),
        DefaultInfo(files = depset(declarations + patches + [p.file for p in package_files])),
    ]

patch_series = rule(
    implementation = _patch_series_impl,
    doc = "A series declaration (<series>/series.json) and the .diff files next to it.",
    attrs = {
        "declaration": attr.label(allow_single_file = ["series.json"], mandatory = True),
        "patches": attr.label_list(allow_files = [".diff", ".patch"], doc = "glob([\"<series>/*.diff\"]): every patch file of the directory"),
        "extends": attr.label(providers = [PatchSeriesInfo], doc = "the parent series (same as `extends` in series.json)"),
        "packages": attr.label_list(allow_files = [".py"], doc = "the files of each package series.json `packages` names (a filegroup in engine/<name>/)"),
    },
)

def _patch_chain_impl(ctx):
    series = ctx.attr.series[PatchSeriesInfo]
    prefix = ctx.label.name + "/"
    patched = ctx.actions.declare_directory(prefix + "patched")
    provenance_json = ctx.actions.declare_file(prefix + "PROVENANCE.json")
    provenance_text = ctx.actions.declare_file(prefix + "PROVENANCE")
    declaration = ctx.actions.declare_file(prefix + "series.resolved.json")
    wheel = ctx.file.base
    leaf = series.declarations[-1]

    args = ctx.actions.args()
    args.add("--patches-dir", leaf.dirname.rpartition("/")[0] or ".")
    args.add("--series", series.name)
    args.add("--base-wheel", wheel)
    args.add("--base-layout", "package")
    args.add("--quiet")
    args.add("--out-dir", patched.path)
    args.add("--provenance-json", provenance_json)
    args.add("--provenance-text", provenance_text)
    args.add("--declaration-out", declaration)
    args.add_all(series.declarations, before_each = "--expect-declaration")
    args.add_all(series.patches, before_each = "--expect-patch")
    for p in series.package_files:
        args.add("--package-file", "%s=%s" % (p.dst, p.file.path))

    ctx.actions.run(
        executable = ctx.executable._applier,
        arguments = [args],
        # The wheel itself, not its unpacked tree: one input to stage instead of thousands.
        inputs = series.declarations + series.patches + [p.file for p in series.package_files] + [wheel],
        outputs = [patched, provenance_json, provenance_text, declaration],
        mnemonic = "PatchChain",
        progress_message = "Verifying and applying patch series %s (%d patches)" % (series.name, len(series.patches)),
    )
    outputs = [patched, provenance_json, provenance_text, declaration]
    return [
        DefaultInfo(files = depset(outputs), runfiles = ctx.runfiles(files = outputs)),
        PatchChainInfo(
            series = series.name,
            patched = patched,
            provenance_json = provenance_json,
            provenance_text = provenance_text,
            declaration = declaration,
        ),
        OutputGroupInfo(patched = depset([patched]), provenance = depset([provenance_json, provenance_text])),
    ]

patch_chain = rule(
    implementation = _patch_chain_impl,
    doc = """Verifies and applies a patch series to the SGLang base (its wheel) in one action.

Outputs <name>/patched (only the touched files, sglang/...), <name>/PROVENANCE.json,
<name>/PROVENANCE and <name>/series.resolved.json.""",
    attrs = {
        "series": attr.label(providers = [PatchSeriesInfo], mandatory = True),
        "base": attr.label(default = "@sglang_src_0_5_19//:wheel.zip", allow_single_file = [".zip", ".whl"], doc = "the wheel the root series declares as its base (sglang/ at its root)"),
        "_applier": attr.label(default = "//tools/patches/private:apply", executable = True, cfg = "exec"),
    },
)
