"""oci_structure_test, and the pieces other areas extend it with (tools/engine)."""

load(":launcher.bzl", "image_runfiles_args", "write_launcher")
load(":providers.bzl", "OciImageInfo")

STRUCTURE_TEST_ATTRS = {
    "image": attr.label(providers = [OciImageInfo], mandatory = True),
    "base": attr.label(providers = [OciImageInfo], doc = "the image must start with this base's layers and name its digest"),
    "inherits_config": attr.bool(default = True, doc = "with base: entrypoint, cmd, env, workdir and user must equal the base's"),
    "expect_labels": attr.string_dict(),
    "expect_label_files": attr.label_list(allow_files = True),
    "expect_env": attr.string_dict(),
    "expect_files": attr.string_list(),
    "expect_absent": attr.string_list(),
}

def structure_test_args(ctx):
    """(arguments, files) of tools/oci/structure.py's checks from STRUCTURE_TEST_ATTRS."""
    image = ctx.attr.image[OciImageInfo]
    args, files = image_runfiles_args(image)
    files += [image.config, image.manifest]
    if ctx.attr.base:
        base = ctx.attr.base[OciImageInfo]
        args += ["--base-image", base.layout.short_path]
        if ctx.attr.inherits_config:
            args.append("--expect-inherited")
        files.append(base.layout)
    for k, v in ctx.attr.expect_labels.items():
        args += ["--expect-label", "%s=%s" % (k, v)]
    for f in ctx.files.expect_label_files:
        args += ["--expect-labels-file", f.short_path]
        files.append(f)
    for k, v in ctx.attr.expect_env.items():
        args += ["--expect-env", "%s=%s" % (k, v)]
    args += ["--expect-file=%s" % p for p in ctx.attr.expect_files]
    args += ["--expect-absent=%s" % p for p in ctx.attr.expect_absent]
    return args, files

def _structure_test_impl(ctx):
    args, files = structure_test_args(ctx)
    return [write_launcher(ctx, ctx.attr._structure, args, files, "daemon-free structure test")]

oci_structure_test = rule(
    implementation = _structure_test_impl,
    test = True,
    doc = """Daemon-free image structure test (in the spirit of rules_img's image_structure_test).

Checks labels and env in the config and files present/absent in the merged layers (whiteouts
honoured). With `base`: the image extends it (and, unless inherits_config = False, keeps its
entrypoint, cmd, env, workdir and user).""",
    attrs = dict(
        STRUCTURE_TEST_ATTRS,
        _structure = attr.label(default = "//tools/oci:structure", executable = True, cfg = "target"),
    ),
)
