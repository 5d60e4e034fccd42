"""Docker schema-2 layer media types and their OCI equivalents (the same bytes).

A base pulled from a Docker-typed registry image keeps its layer blobs; the OCI manifest of an
image built on it re-describes those layers with the OCI types, so one manifest never mixes the
two families (tools/oci/image.py, tools/oci/pull.py).
"""

OCI_LAYER_FOR_DOCKER = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar": "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
}


def oci_layer_type(media_type: str) -> str:
    return OCI_LAYER_FOR_DOCKER.get(media_type, media_type)
