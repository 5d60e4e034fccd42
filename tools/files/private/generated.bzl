"""generated_files: NAME (the committed files), NAME.update and NAME_test for one generator."""

load("//tools/python:defs.bzl", "py_program", "workspace_root_imports")

def _generate_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    args = ctx.actions.args()
    args.add_all([ctx.expand_location(a, ctx.attr.data) for a in ctx.attr.generator_args])
    args.add("--out-dir", out.path)
    ctx.actions.run(
        executable = ctx.executable.generator,
        arguments = [args],
        inputs = ctx.files.data,
        outputs = [out],
        mnemonic = "GenerateFiles",
        progress_message = "Generating the files of %s" % ctx.label,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

_generate = rule(
    implementation = _generate_impl,
    attrs = {
        "data": attr.label_list(allow_files = True),
        "generator": attr.label(executable = True, cfg = "exec", mandatory = True),
        "generator_args": attr.string_list(),
    },
)

def generated_files(name, srcs, generator, generator_args = [], data = [], **kwargs):
    """The committed files `srcs` are what `generator` writes; see //tools/files:defs.bzl.

    Args:
      name: NAME: a filegroup of `srcs`; also makes NAME.update and NAME_test.
      srcs: the committed files, as paths relative to this package (a glob is fine: a file the
        generator no longer writes fails the test and NAME.update deletes it).
      generator: an executable run as `generator GENERATOR_ARGS... --out-dir DIR`; it writes
        every file it generates under DIR, by its path relative to this package.
      generator_args: its arguments; $(execpath) of `data` labels is expanded.
      data: the generator's inputs besides its own runfiles.
      **kwargs: passed to every target (tags, visibility, ...).
    """
    tree = name + ".generated"
    _generate(
        name = tree,
        data = data,
        generator = generator,
        generator_args = generator_args,
        **kwargs
    )
    native.filegroup(
        name = name,
        srcs = srcs,
        **kwargs
    )
    package = native.package_name()
    common = [
        "--package=" + package,
        "--tree=$(rootpath :%s)" % tree,
        "--update-label=//%s:%s.update" % (package, name),
    ]
    program = "//tools/files/private:generated.py"
    py_program(
        name = name + ".update",
        srcs = [program],
        data = [":" + tree],
        args = ["update"] + common + srcs,
        deps = ["//tools/files:atomic"],
        **kwargs
    )
    native.py_test(
        name = name + "_test",
        size = "small",
        srcs = [program],
        main = program,
        python_version = "PY3",
        data = [":" + tree] + srcs,
        args = ["check"] + common + srcs,
        imports = workspace_root_imports(),
        deps = ["//tools/files:atomic"],
        **kwargs
    )
