"""Implementation of patch_bump_check (public API: //tools/patches:defs.bzl)."""

load("//tools/patches:repositories.bzl", "sglang_source_repository_name")
load("//tools/podman:defs.bzl", "image_files")
load("//tools/python:defs.bzl", "py_program")

def _json_file_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    ctx.actions.write(out, ctx.attr.content)
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

_json_file = rule(
    implementation = _json_file_impl,
    doc = "Writes `content` (a JSON document) to <name>.json.",
    attrs = {"content": attr.string(mandatory = True)},
)

def patch_bump_check(name, candidates, series, series_files, tests, patch_tests, package_support = {}, **kwargs):
    """`bazel run :<name> -- --to VERSION`: the series on a candidate release (see bump_main.py).

    Args:
      name: target name.
      candidates: the candidate table: version -> {wheel, url, sha256, cpu_base (image label or
        None), cpu_lock}; each has a source repository @sglang_src_<v>.
      series: leaf series names to check (each with its ancestors), e.g. ["v3"].
      series_files: a filegroup of every series.json and .diff the series need.
      tests: filegroups holding every file of the series' tests (conftests, helpers too).
      patch_tests: "<series>/<patch file>" -> the test files (package-relative) whose
        detects_stock_bug tests decide whether that patch is still needed.
      package_support: package name -> the label of its sglang_support.py, for every package
        the series ship (series.json `packages`): the SGLang names it uses, looked up on the
        candidate.
      **kwargs: passed to the py_binary (visibility, tags).
    """
    config = name + "_config"
    _json_file(
        name = config,
        content = json.encode({"candidates": candidates, "patch_tests": patch_tests}),
    )
    data = [":" + config, series_files] + tests
    args = ["--config", "$(rootpath :%s)" % config, "--patches-dir", native.package_name()]
    for s in series:
        args += ["--series", s]
    for version in sorted(candidates):
        repo = "@" + sglang_source_repository_name(version)
        marker = repo + "//:sglang/__init__.py"
        data += [repo + "//:tree", marker]
        args += ["--tree", "%s=$(rootpath %s)" % (version, marker)]
        if candidates[version].get("cpu_base"):
            files = "%s_%s_cpu_base" % (name, version.replace(".", "_"))
            image_files(name = files, image = candidates[version]["cpu_base"])
            data.append(":" + files)
            args += ["--cpu-base", "%s=$(rootpath :%s)" % (version, files)]
    for package, support in sorted(package_support.items()):
        data.append(support)
        args += ["--package-support", "%s=$(rootpath %s)" % (package, support)]
    args += ["--test-files"] + ["$(rootpaths %s)" % t for t in tests]
    py_program(
        name = name,
        srcs = ["//tools/patches/private:bump_check.py"],
        deps = [
            "//tools/patches/private:patchchain",
            "//tools/podman:run_in_image_lib",
        ],
        data = data,
        args = args,
        **kwargs
    )
