"""Release targets of an engine image: facts, .release, .push, record test, evidence, verify."""

load("//tools/oci:defs.bzl", "OciImageInfo", "OciLayerInfo")
load("//tools/oci:internal.bzl", "image_runfiles_args", "write_launcher")
load("//tools/patches:defs.bzl", "PatchChainInfo")
load(":sbom.bzl", "layer_sbom_aspect", "merged_sbom")

def _recipe(ctx):
    # "//recipes:glm53_v3" (Bazel 4 prints main-repository labels without "@").
    label = ctx.attr.image.label
    return "//%s:%s" % (label.package, label.name)

# --- facts ----------------------------------------------------------------------------------------

def _facts_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    layer = ctx.attr.patch_layer[OciLayerInfo]
    chain = ctx.attr.chain[PatchChainInfo]
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    args = ctx.actions.args()
    args.add("--recipe", _recipe(ctx))
    args.add("--image-digest", image.digest)
    args.add("--image-manifest", image.manifest)
    args.add("--image-config", image.config)
    args.add("--image-contents", image.contents)
    args.add("--patch-layer-descriptor", layer.descriptor)
    args.add("--patches-json", ctx.file.patches_json)
    args.add("--declaration", chain.declaration)

    # The flavor follows from the base target: a pulled registry image (oci_pull) has only
    # shallow layers; a base built here from the CPU lock carries its layer blobs.
    base_layers = image.layers[:-1]
    pulled = base_layers and all([layer.blob == None for layer in base_layers])
    args.add("--base-flavor", "production" if pulled else "cpu-test")
    args.add("--out", out)
    ctx.actions.run(
        executable = ctx.executable._facts,
        arguments = [args],
        inputs = [image.digest, image.manifest, image.config, image.contents, layer.descriptor, ctx.file.patches_json, chain.declaration],
        outputs = [out],
        mnemonic = "ReleaseFacts",
        progress_message = "Collecting the release facts of %s" % _recipe(ctx),
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

release_facts = rule(
    implementation = _facts_impl,
    doc = "<name>.json: what a release record states about the image, cross-checked (tools/release/facts.py).",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "patch_layer": attr.label(providers = [OciLayerInfo], mandatory = True),
        "patches_json": attr.label(allow_single_file = True, mandatory = True),
        "chain": attr.label(providers = [PatchChainInfo], mandatory = True),
        "_facts": attr.label(default = "//tools/release:facts", executable = True, cfg = "exec"),
    },
)

# --- bazel run targets ----------------------------------------------------------------------------

def _release_run_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    facts = ctx.file.facts
    args = ["release", "--facts", facts.short_path, "--digest-file", image.digest.short_path]
    return [write_launcher(ctx, ctx.attr._record, args, [facts, image.digest], "record a release")]

release_run = rule(
    implementation = _release_run_impl,
    executable = True,
    doc = "bazel run: record the built image as a release (unpublished) in recipes/releases/.",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "facts": attr.label(allow_single_file = True, mandatory = True),
        "_record": attr.label(default = "//tools/release:record", executable = True, cfg = "target"),
    },
)

def _push_run_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    layout_args, files = image_runfiles_args(image, layout_flag = "--layout")
    args = layout_args + ["--digest-file", image.digest.short_path, "--facts", ctx.file.facts.short_path]
    return [write_launcher(ctx, ctx.attr._push, args, files + [ctx.file.facts], "push and record")]

push_run = rule(
    implementation = _push_run_impl,
    executable = True,
    doc = "bazel run: push the image with skopeo, verify the registry's digest, record the release.",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True),
        "facts": attr.label(allow_single_file = True, mandatory = True),
        "_push": attr.label(default = "//tools/release:push", executable = True, cfg = "target"),
    },
)

# --- record test ----------------------------------------------------------------------------------

def _record_test_impl(ctx):
    chain = ctx.attr.chain[PatchChainInfo]
    name = ctx.attr.record_name
    matches = [f for f in ctx.files.records if f.basename == name]

    # A missing record is reported by the test itself (with the command that creates it).
    record_path = matches[0].short_path if matches else ctx.attr.records.label.package + "/" + name
    args = ["check", "--facts", ctx.file.facts.short_path, "--record", record_path, "--declaration", chain.declaration.short_path]
    if ctx.attr.base_strict:
        args.append("--base-strict")
    return [write_launcher(ctx, ctx.attr._record, args, [ctx.file.facts, chain.declaration] + matches, "release record check")]

release_record_test = rule(
    implementation = _record_test_impl,
    test = True,
    doc = "Fails when the committed record no longer matches what the recipe builds.",
    attrs = {
        "facts": attr.label(allow_single_file = True, mandatory = True),
        "chain": attr.label(providers = [PatchChainInfo], mandatory = True),
        "records": attr.label(allow_files = True, mandatory = True, doc = "the committed records (a filegroup in the records' directory)"),
        "record_name": attr.string(mandatory = True),
        "base_strict": attr.bool(default = False),
        "_record": attr.label(default = "//tools/release:record", executable = True, cfg = "target"),
    },
)

# --- evidence -------------------------------------------------------------------------------------

def _evidence_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    chain = ctx.attr.chain[PatchChainInfo]
    prefix = ctx.label.name + "/"
    sbom = ctx.actions.declare_file(prefix + "sbom.spdx.json")
    statement = ctx.actions.declare_file(prefix + "provenance.json")
    envelope = ctx.actions.declare_file(prefix + "provenance.dsse.json")
    public_key = ctx.actions.declare_file(prefix + "signing-key.pub.pem")
    tool = ctx.executable._evidence

    merged_sbom(ctx, ctx.attr.image, sbom, chain.declaration)

    st_args = ctx.actions.args()
    st_args.add("statement")
    st_args.add("--recipe", _recipe(ctx))
    st_args.add("--facts", ctx.file.facts)
    st_args.add("--declaration", chain.declaration)
    st_args.add("--contents", image.contents)
    for lock in ctx.files.locks:
        st_args.add("--lock", "%s=%s" % (lock.short_path, lock.path))
    st_args.add("--sbom", sbom)
    st_args.add("--out", statement)
    ctx.actions.run(
        executable = tool,
        arguments = [st_args],
        inputs = [ctx.file.facts, chain.declaration, image.contents, sbom] + ctx.files.locks,
        outputs = [statement],
        mnemonic = "Provenance",
        progress_message = "Writing the SLSA provenance of %s" % _recipe(ctx),
    )

    ctx.actions.run(
        executable = tool,
        arguments = ["sign", "--statement", statement.path, "--key", ctx.file.key.path, "--out", envelope.path, "--public-key-out", public_key.path],
        inputs = [statement, ctx.file.key],
        outputs = [envelope, public_key],
        mnemonic = "DsseSign",
        progress_message = "Signing the provenance of %s (DSSE, ed25519)" % _recipe(ctx),
    )
    files = [sbom, statement, envelope, public_key]
    return [DefaultInfo(files = depset(files), runfiles = ctx.runfiles(files = files))]

image_evidence = rule(
    implementation = _evidence_impl,
    doc = "<name>/: sbom.spdx.json (merged from one SBOM per layer), provenance.json (in-toto/SLSA v1), provenance.dsse.json, signing-key.pub.pem.",
    attrs = {
        "image": attr.label(providers = [OciImageInfo], mandatory = True, aspects = [layer_sbom_aspect]),
        "chain": attr.label(providers = [PatchChainInfo], mandatory = True),
        "facts": attr.label(allow_single_file = True, mandatory = True),
        "locks": attr.label_list(allow_files = True, mandatory = True, doc = "lock files, listed as provenance materials"),
        "key": attr.label(allow_single_file = True, mandatory = True),
        "_evidence": attr.label(default = "//tools/release:evidence", executable = True, cfg = "exec"),
        "_layer_sbom": attr.label(default = "//tools/release:layer_sbom", executable = True, cfg = "exec"),
    },
)

def _evidence_files(ctx):
    out = {}
    for f in ctx.files.evidence:
        out[f.basename] = f
    return out

def _verify_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    ev = _evidence_files(ctx)
    args = [
        "verify",
        "--envelope",
        ev["provenance.dsse.json"].short_path,
        "--public-key",
        ev["signing-key.pub.pem"].short_path,
        "--digest-file",
        image.digest.short_path,
        "--sbom",
        ev["sbom.spdx.json"].short_path,
    ]
    return [write_launcher(ctx, ctx.attr._evidence, args, ctx.files.evidence + [image.digest], "verify evidence")]

_VERIFY_ATTRS = {
    "image": attr.label(providers = [OciImageInfo], mandatory = True),
    "evidence": attr.label(mandatory = True),
    "_evidence": attr.label(default = "//tools/release:evidence", executable = True, cfg = "target"),
}

evidence_verify = rule(
    implementation = _verify_impl,
    executable = True,
    doc = "bazel run: check the evidence's signature, subject digest and SBOM (later flags override).",
    attrs = _VERIFY_ATTRS,
)

evidence_verify_test = rule(
    implementation = _verify_impl,
    test = True,
    doc = "The same check as a test.",
    attrs = _VERIFY_ATTRS,
)

def _sign_impl(ctx):
    ev = _evidence_files(ctx)
    args = ["sign", "--statement", ev["provenance.json"].short_path]
    return [write_launcher(ctx, ctx.attr._evidence, args, ctx.files.evidence, "sign with your key")]

evidence_sign = rule(
    implementation = _sign_impl,
    executable = True,
    doc = "bazel run <name> -- --key KEY.pem --out ENVELOPE [--public-key-out PUB]: sign the built statement.",
    attrs = {
        "evidence": attr.label(mandatory = True),
        "_evidence": attr.label(default = "//tools/release:evidence", executable = True, cfg = "target"),
    },
)
