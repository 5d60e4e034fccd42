"""WORKSPACE API for Debian packages (one lock = one repository).

    load("//tools/oci/debian:repositories.bzl", "debian_packages")

    debian_packages(name = "debian_runtime_debs", lock = "//recipes/bases:debian.lock")

gives @debian_runtime_debs//:debs (every locked .deb, downloaded with its sha256 from the
lock's mirrors) and @debian_runtime_debs//:resolved.lock, the two inputs of a
debian_rootfs_layer. A locked version no mirror has any more is replaced by the archive's
current one (one warning; recorded in resolved.lock, so it changes the layer's action key;
`--config=release` builds refuse it).
"""

load("//tools/oci/debian/private:debian_repository.bzl", _debian_packages = "debian_packages")

debian_packages = _debian_packages
