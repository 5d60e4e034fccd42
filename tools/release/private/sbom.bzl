"""SBOM once per layer (an aspect on the image's base and layer targets), merged per image."""

load("//tools/oci:defs.bzl", "OciImageInfo", "OciLayerInfo")

LayerSbomInfo = provider(
    doc = "Per-layer SPDX documents of an image or a layer target.",
    fields = {"by_descriptor": "dict: layer descriptor File path -> its SBOM File"},
)

def _scan(ctx, owner, layer, tool):
    out = ctx.actions.declare_file("%s.layer_sboms/%s.spdx.json" % (owner.name, layer.descriptor.basename[:-len(".json")]))
    ctx.actions.run(
        executable = tool,
        arguments = ["layer", "--descriptor", layer.descriptor.path, "--blob", layer.blob.path, "--name", str(owner), "--out", out.path],
        inputs = [layer.descriptor, layer.blob],
        outputs = [out],
        mnemonic = "LayerSbom",
        progress_message = "Scanning layer %s with syft" % owner,
    )
    return out

def _layer_sbom_aspect_impl(target, ctx):
    tool = ctx.executable._layer_sbom
    found = {}
    for attr in ["base", "tars", "actual"]:
        deps = getattr(ctx.rule.attr, attr, None)
        if deps == None:
            continue
        for dep in deps if type(deps) == "list" else [deps]:
            if LayerSbomInfo in dep:
                found.update(dep[LayerSbomInfo].by_descriptor)
    if OciImageInfo in target:
        # Layers not owned by a layer target (plain .tar files) are scanned here.
        for i, layer in enumerate(target[OciImageInfo].layers):
            if layer.blob != None and layer.descriptor.path not in found:
                found[layer.descriptor.path] = _scan(ctx, target.label, layer, tool)
    elif OciLayerInfo in target:
        layer = target[OciLayerInfo]
        if layer.blob != None:
            found[layer.descriptor.path] = _scan(ctx, target.label, layer, tool)
    return [LayerSbomInfo(by_descriptor = found)]

layer_sbom_aspect = aspect(
    implementation = _layer_sbom_aspect_impl,
    attr_aspects = ["base", "tars", "actual"],
    attrs = {
        "_layer_sbom": attr.label(default = "//tools/release:layer_sbom", executable = True, cfg = "exec"),
    },
)

def merged_sbom(ctx, image_target, out, declaration = None):
    """Adds the action writing `out`: the image's SBOM from its layers' (see layer_sbom.py)."""
    image = image_target[OciImageInfo]
    by_descriptor = image_target[LayerSbomInfo].by_descriptor
    args = ctx.actions.args()
    args.add("merge")
    args.add("--name", image_target.label.name)
    args.add("--digest-file", image.digest)
    inputs = [image.digest]
    for layer in image.layers:
        sbom = by_descriptor.get(layer.descriptor.path)
        if sbom == None:
            fail("%s: layer %s has no blob to scan (shallow base); pull the base to make an SBOM" % (image_target.label, layer.descriptor.short_path))
        args.add("--layer", "%s=%s" % (layer.descriptor.path, sbom.path))
        inputs += [layer.descriptor, sbom]
    if declaration:
        args.add("--declaration", declaration)
        inputs.append(declaration)
    args.add("--out", out)
    ctx.actions.run(
        executable = ctx.executable._layer_sbom,
        arguments = [args],
        inputs = inputs,
        outputs = [out],
        mnemonic = "Sbom",
        progress_message = "Merging the layer SBOMs of %s" % image_target.label,
    )
