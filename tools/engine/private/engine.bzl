"""The patch layer of an engine image (from a patch_chain), its structure test, its fingerprint."""

load("//tools/oci:defs.bzl", "OciImageInfo", "OciLayerInfo")
load("//tools/oci:internal.bzl", "STRUCTURE_TEST_ATTRS", "structure_test_args", "write_launcher")
load("//tools/patches:defs.bzl", "PatchChainInfo")

# Where an engine image keeps each recipe's files (series.json, PROVENANCE, patches.json, tests).
RECIPES_DIR = "/usr/share/glm53-engine"

def recipe_dir(recipe):
    return RECIPES_DIR + "/" + recipe

def _engine_patch_layer_impl(ctx):
    chain = ctx.attr.chain[PatchChainInfo]
    name = ctx.label.name
    tar = ctx.actions.declare_file(name + ".tar")
    descriptor = ctx.actions.declare_file(name + ".descriptor.json")
    contents = ctx.actions.declare_file(name + ".contents.json")
    digest = ctx.actions.declare_file(name + ".digest")
    patches = ctx.actions.declare_file(name + ".patches.json")
    labels = ctx.actions.declare_file(name + ".labels")

    # Its own action, keyed on the patched files and `site` only: an edit that leaves the
    # patched bytes alone (a patch's description, a declaration field) reuses the cached .pyc.
    pyc = ctx.actions.declare_directory(name + ".pyc")
    pyc_args = ctx.actions.args()
    pyc_args.add("--patched", chain.patched.path)
    pyc_args.add("--site", ctx.attr.site)
    pyc_args.add("--out", pyc.path)
    ctx.actions.run(
        executable = ctx.executable._patch_pyc,
        arguments = [pyc_args],
        inputs = [chain.patched],
        outputs = [pyc],
        mnemonic = "OciPatchPyc",
        progress_message = "Compiling the patched files of series %s for %s" % (chain.series, ctx.attr.site),
    )

    args = ctx.actions.args()
    args.add("--patched", chain.patched.path)
    args.add("--pyc", pyc.path)
    args.add("--declaration", chain.declaration)
    args.add("--provenance-json", chain.provenance_json)
    args.add("--provenance-text", chain.provenance_text)
    for f in ctx.files.tests:
        args.add("--test", "%s=%s" % (f.path, f.short_path))
    args.add("--recipe", ctx.attr.recipe)
    args.add("--recipe-dir", recipe_dir(ctx.attr.recipe))
    args.add("--site", ctx.attr.site)
    args.add("--out", tar)
    args.add("--out-descriptor", descriptor)
    args.add("--out-digest", digest)
    args.add("--out-contents", contents)
    args.add("--out-patches", patches)
    args.add("--out-labels", labels)
    outputs = [tar, descriptor, contents, digest, patches, labels]
    ctx.actions.run(
        executable = ctx.executable._patch_layer,
        arguments = [args],
        inputs = [chain.patched, pyc, chain.declaration, chain.provenance_json, chain.provenance_text] + ctx.files.tests,
        outputs = outputs,
        mnemonic = "OciPatchLayer",
        progress_message = "Writing the patch layer of series %s for %s" % (chain.series, ctx.attr.recipe),
    )
    return [
        DefaultInfo(files = depset([tar, digest])),
        OciLayerInfo(blob = tar, descriptor = descriptor, contents = contents),
        OutputGroupInfo(
            digest = depset([digest]),
            patches = depset([patches]),
            labels = depset([labels]),
            metadata = depset([descriptor, contents, patches, labels]),
        ),
    ]

engine_patch_layer = rule(
    implementation = _engine_patch_layer_impl,
    doc = """The one layer an engine image adds: patched SGLang files (+ .pyc), recipe, PROVENANCE, tests.

Depends only on the chain, the tests, the recipe name and `site`, never on a base: the same
bytes (and digest) on the CPU base and on the production base.""",
    attrs = {
        "chain": attr.label(providers = [PatchChainInfo], mandatory = True),
        "tests": attr.label_list(allow_files = True),
        "recipe": attr.string(mandatory = True),
        "site": attr.string(default = "/usr/lib/python3/dist-packages"),
        "_patch_layer": attr.label(default = "//tools/engine:patch_layer", executable = True, cfg = "exec"),
        "_patch_pyc": attr.label(default = "//tools/engine:patch_pyc", executable = True, cfg = "exec"),
    },
)

def _engine_structure_test_impl(ctx):
    chain = ctx.attr.chain[PatchChainInfo]
    args, files = structure_test_args(ctx)
    args += ["--provenance", chain.provenance_json.short_path, "--site", ctx.attr.site, "--recipe-dir", recipe_dir(ctx.attr.recipe)]
    return [write_launcher(ctx, ctx.attr._structure, args, files + [chain.provenance_json], "engine image structure test")]

engine_structure_test = rule(
    implementation = _engine_structure_test_impl,
    test = True,
    doc = """oci_structure_test's checks plus the chain's: every file the patch chain outputs sits at
<site>/<path> in the image and hashes to the chain's after-hash, its .pyc was compiled from
it, deleted files are gone, and the recipe files sit in recipe_dir(recipe).""",
    attrs = dict(
        STRUCTURE_TEST_ATTRS,
        chain = attr.label(providers = [PatchChainInfo], mandatory = True),
        recipe = attr.string(mandatory = True),
        site = attr.string(default = "/usr/lib/python3/dist-packages"),
        _structure = attr.label(default = "//tools/engine:structure", executable = True, cfg = "target"),
    ),
)

def _recipe_fingerprint_impl(ctx):
    chain = ctx.attr.chain[PatchChainInfo]
    base = ctx.attr.base[OciImageInfo]
    out = ctx.actions.declare_file(ctx.label.name)
    args = ctx.actions.args()
    args.add("--declaration", chain.declaration)
    args.add("--base-digest-file", base.digest)
    args.add("--out", out)
    ctx.actions.run(
        executable = ctx.executable._fingerprint,
        arguments = [args],
        inputs = [chain.declaration, base.digest],
        outputs = [out],
        mnemonic = "RecipeFingerprint",
        progress_message = "Fingerprinting %s" % ctx.label,
    )
    return [DefaultInfo(files = depset([out]))]

recipe_fingerprint = rule(
    implementation = _recipe_fingerprint_impl,
    doc = "'sha256:<hex>\\n': the recipe fingerprint (tools/release/fingerprint.py) of chain + base digest.",
    attrs = {
        "chain": attr.label(providers = [PatchChainInfo], mandatory = True),
        "base": attr.label(providers = [OciImageInfo], mandatory = True),
        "_fingerprint": attr.label(default = "//tools/release:fingerprint", executable = True, cfg = "exec"),
    },
)
