"""The one launcher writer: a bash script running a tool with fixed arguments + "$@"."""

def shell_quote(s):
    """s as one bash word: single quotes, each ' written as '"'"' (any path works)."""
    return "'" + s.replace("'", "'\"'\"'") + "'"

def write_launcher(ctx, tool, args, files, comment):
    """DefaultInfo of <name>.sh running `tool` (an executable attr's target) with `args` + "$@".

    Paths in `args` must be runfiles-relative (File.short_path): the script runs in the
    runfiles directory, for `bazel test` and `bazel run` alike.

    Args:
      ctx: the rule context.
      tool: the target of an executable attribute (cfg = "target": it runs at test/run time).
      args: list of strings, each quoted for bash.
      files: Files the script needs in its runfiles.
      comment: what the script is for (its second line).

    Returns:
      DefaultInfo with the script as executable, runfiles = files + the tool's.
    """
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, "\n".join([
        "#!/usr/bin/env bash",
        "# %s (generated for %s)." % (comment, ctx.label),
        "set -euo pipefail",
        "exec %s %s \"$@\"" % (shell_quote(tool.files_to_run.executable.short_path), " ".join([shell_quote(a) for a in args])),
        "",
    ]), is_executable = True)
    runfiles = ctx.runfiles(files = files).merge(tool[DefaultInfo].default_runfiles)
    return DefaultInfo(executable = script, runfiles = runfiles)

def image_runfiles_args(image, layout_flag = "--image"):
    """(arguments, files) naming an OciImageInfo for a launcher, runfiles-relative.

    `layout_flag` LAYOUT, then --blob DESCRIPTOR=BLOB per layer that has a blob (every blob is
    a runfile: symlinked, never copied). Shallow layers (no blob) are left out; see
    require_blobs.
    """
    args = [layout_flag, image.layout.short_path]
    files = [image.layout, image.digest]
    for layer in image.layers:
        if layer.blob != None:
            args += ["--blob", "%s=%s" % (layer.descriptor.short_path, layer.blob.short_path)]
            files += [layer.descriptor, layer.blob]
    return args, files

def require_blobs(image, what):
    """Fails the analysis when the image has shallow layers (a base pulled without blobs)."""
    if [layer for layer in image.layers if layer.blob == None]:
        fail("%s has shallow layers (no blobs); pull its base to %s it" % (image.layout.short_path, what))
