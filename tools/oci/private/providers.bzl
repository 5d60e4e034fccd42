"""Providers shared by the OCI rules (the providers re-exported by //tools/oci:defs.bzl, the helpers by internal.bzl)."""

OciLayerInfo = provider(
    doc = "One image layer.",
    fields = {
        "blob": "File: the layer blob (uncompressed tar), or None for a shallow base layer (not fetched)",
        "descriptor": "File: JSON {mediaType, digest, size, diff_id, created_by}",
        "contents": "File or None: JSON listing what went into the layer (debs, wheels, patched files), for provenance and SBOM",
    },
)

OciImageInfo = provider(
    doc = "An image assembled by oci_image (or a base imported from elsewhere).",
    fields = {
        "layout": "File (directory): OCI layout with oci-layout, index.json, the manifest and config blobs and the embedded layer blobs; other layer blobs are in `layers`",
        "digest": "File: 'sha256:<64 hex>\\n', the manifest digest",
        "manifest": "File: the manifest JSON (the blob)",
        "config": "File: the config JSON (the blob)",
        "contents": "File: JSON {image, digest, layers: [{descriptor, contents}]}, base layers first",
        "layers": "list of OciLayerInfo, bottom first, base layers included",
        "image_name": "string: the name images built on this one carry as org.opencontainers.image.base.name",
    },
)

def layer_blobs(image_info):
    """Every layer blob of an image (for runfiles or action inputs); shallow layers have none."""
    return [l.blob for l in image_info.layers if l.blob != None]

def layer_args(image_info, path_of):
    """['DESCRIPTOR=BLOB', ...] for tools/oci/materialize.py --blob, paths made by path_of(File)."""
    return ["%s=%s" % (path_of(l.descriptor), path_of(l.blob)) for l in image_info.layers if l.blob != None]
