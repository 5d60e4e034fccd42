"""launcher_quoting_test: a write_launcher script must pass every word to its tool unchanged."""

load("//tools/oci:internal.bzl", "write_launcher")

def _impl(ctx):
    words = ctx.attr.words + [f.short_path for f in ctx.files.data]
    expected = ctx.actions.declare_file(ctx.label.name + ".expected.json")
    ctx.actions.write(expected, json.encode(words))
    return [write_launcher(ctx, ctx.attr._check, ["--expected", expected.short_path, "--"] + words, ctx.files.data + [expected], "launcher quoting test")]

launcher_quoting_test = rule(
    implementation = _impl,
    test = True,
    doc = "Runs the generated launcher; tests/check_args.py compares the argv it gets with `words` + the data paths.",
    attrs = {
        "words": attr.string_list(),
        "data": attr.label_list(allow_files = True),
        "_check": attr.label(default = "//tools/oci:check_args", executable = True, cfg = "target"),
    },
)
