"""Roots and exclusions of the CPU base's Debian closure (also the remote-execution image's, tools/remote)."""

# Roots of the Debian closure: CPython 3.11 and what torch/triton wheels load (libstdc++,
# libgcc, libgomp), CA certificates, tzdata (zoneinfo), media-types (mimetypes).
DEBIAN_ROOTS = [
    "python3.11-minimal",
    "libpython3.11-stdlib",
    "python3-minimal",
    "ca-certificates",
    "libstdc++6",
    "libgcc-s1",
    "libgomp1",
    "tzdata",
    "media-types",
]

# In the closure only for maintainer scripts, which never run here (dpkg-deb -x). openssl's
# two symlinks the runtime needs (/usr/lib/ssl/{cert.pem,certs}) are recreated by debroot.py.
DEBIAN_EXCLUDE = [
    "dpkg",
    "tar",
    "debconf",
    "openssl",
    "libmd0",
    "libselinux1",
    "libpcre2-8-0",
    "libacl1",
    "libzstd1",
]
