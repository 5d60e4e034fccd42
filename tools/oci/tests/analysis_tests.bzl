"""Analysis tests of the OCI rules: providers, action inputs and arguments, launchers, errors.

    bazel test //tools/oci:analysis_tests

Execution requirements are not checked here: Bazel 4.2.3's Starlark Action objects expose
args, argv, content, env, inputs, mnemonic, outputs and substitutions, but not execution_info;
tools/oci/README.md gives the aquery that shows them.
"""

load("@bazel_skylib//lib:unittest.bzl", "analysistest", "asserts")
load("//tools/oci/private:providers.bzl", "OciImageInfo", "OciLayerInfo")

def _actions(env, mnemonic):
    return [a for a in analysistest.target_actions(env) if a.mnemonic == mnemonic]

def _one_action(env, mnemonic):
    found = _actions(env, mnemonic)
    asserts.equals(env, 1, len(found), "%s actions of %s" % (mnemonic, analysistest.target_under_test(env).label))
    return found[0] if found else None

# --- oci_image ------------------------------------------------------------------------------------

def _image_providers_impl(ctx):
    env = analysistest.begin(ctx)
    target = analysistest.target_under_test(env)
    info = target[OciImageInfo]
    asserts.true(env, info.layout.is_directory, "OciImageInfo.layout is a directory")
    asserts.equals(env, "example_image.digest", info.digest.basename)
    asserts.equals(env, ["example_image", "example_image.digest"], sorted([f.basename for f in target[DefaultInfo].files.to_list()]))
    asserts.equals(env, 2, len(info.layers), "base layer + own tar")
    base_layer, own_layer = info.layers
    asserts.true(env, base_layer.contents != None, "an oci_layer records its contents")
    asserts.equals(env, None, own_layer.contents, "a plain .tar has no contents record")
    asserts.equals(env, "example.tar", own_layer.blob.basename)
    asserts.equals(env, str(target.label), info.image_name, "image_name defaults to the label")
    action = _one_action(env, "OciImage")
    if action:
        inputs = [f.basename for f in action.inputs.to_list()]

        # The image action reads descriptors only: a base's layer blobs never enter its key.
        asserts.false(env, "example_layer.tar" in inputs, "base layer blob must not be an input of the image action")
        asserts.true(env, "example_base.digest" in inputs, "base digest feeds the base.digest label/annotation")
        argv = " ".join(action.argv)
        for flag in ["--annotation org.opencontainers.image.base.name=example/base:1", "--annotation-from-file org.opencontainers.image.base.digest="]:
            asserts.true(env, flag in argv, "OciImage argv lacks %r" % flag)
    return analysistest.end(env)

image_providers_test = analysistest.make(_image_providers_impl)

def _digest_target_impl(ctx):
    # <image>.digest is made by the oci_image macro from the rule's "digest" output group.
    env = analysistest.begin(ctx)
    files = analysistest.target_under_test(env)[DefaultInfo].files.to_list()
    asserts.equals(env, ["tools/oci/example_image.digest"], [f.short_path for f in files])
    return analysistest.end(env)

digest_target_test = analysistest.make(_digest_target_impl)

def _tars_reject_impl(ctx):
    env = analysistest.begin(ctx)
    asserts.expect_failure(env, "does not produce any oci_image_rule tars files (expected .tar)")
    return analysistest.end(env)

tars_reject_test = analysistest.make(_tars_reject_impl, expect_failure = True)

# --- layers ---------------------------------------------------------------------------------------

def _layer_providers_impl(ctx):
    env = analysistest.begin(ctx)
    info = analysistest.target_under_test(env)[OciLayerInfo]
    asserts.equals(env, "example_layer.tar", info.blob.basename)
    asserts.true(env, info.descriptor.basename.endswith(".json"))
    return analysistest.end(env)

layer_providers_test = analysistest.make(_layer_providers_impl)

# --- run targets and the conformance test ---------------------------------------------------------

def _launcher_impl(ctx):
    env = analysistest.begin(ctx)
    target = analysistest.target_under_test(env)
    writes = _actions(env, "FileWrite")
    asserts.equals(env, 1, len(writes), "one launcher script")
    if writes:
        for want in ctx.attr.expected_args:
            asserts.true(env, want in writes[0].content, "launcher lacks %r:\n%s" % (want, writes[0].content))
    runfiles = [f.basename for f in target[DefaultInfo].default_runfiles.files.to_list()]
    for blob in ["example_layer.tar", "example.tar"]:
        asserts.true(env, blob in runfiles, "every layer blob is a runfile (the view links to it): %s missing" % blob)
    return analysistest.end(env)

launcher_test = analysistest.make(_launcher_impl, attrs = {"expected_args": attr.string_list()})

def _shallow_reject_impl(ctx):
    env = analysistest.begin(ctx)
    asserts.expect_failure(env, "has shallow layers (no blobs)")
    return analysistest.end(env)

shallow_reject_test = analysistest.make(_shallow_reject_impl, expect_failure = True)

def _shallow_base_impl(ctx):
    env = analysistest.begin(ctx)
    info = analysistest.target_under_test(env)[OciImageInfo]
    asserts.equals(env, [None], [layer.blob for layer in info.layers], "a pulled base's layers have no blob")
    asserts.equals(env, ["layer.json"], [layer.descriptor.basename for layer in info.layers])
    asserts.equals(env, "registry.invalid/shallow", info.image_name)
    action = _one_action(env, "ShallowBase")
    if action:
        inputs = sorted([f.basename for f in action.inputs.to_list() if f.basename.endswith(".json") or f.basename == "digest"])
        asserts.equals(env, ["config.json", "digest", "expect.json", "files.json", "manifest.json"], inputs)
        argv = " ".join(action.argv)
        for flag in ["--files tools/oci/tests/testdata/shallow/files.json", "--expect tools/oci/tests/testdata/shallow/expect.json", "--name registry.invalid/shallow"]:
            asserts.true(env, flag in argv, "ShallowBase argv lacks %r: %s" % (flag, argv))
    return analysistest.end(env)

shallow_base_test = analysistest.make(_shallow_base_impl)

def _shallow_needs_files_impl(ctx):
    env = analysistest.begin(ctx)
    asserts.expect_failure(env, "`expect` needs `files`")
    return analysistest.end(env)

shallow_needs_files_test = analysistest.make(_shallow_needs_files_impl, expect_failure = True)
