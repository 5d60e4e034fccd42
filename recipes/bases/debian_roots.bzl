"""Roots, exclusions and archives of the CPU base's Debian closure (also the remote-execution image's, tools/remote)."""

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

# In the closure only for maintainer scripts, which never run here (debroot.py unpacks). openssl's
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

# Where the lock takes packages from: NAME SUITES MIRRORS (first mirror: the one apt resolves
# against; the repository rule tries them in order). Every locked version's pool path is under
# one archive; debian-security holds the `~debNNuN`/`+debNNuN` security updates until a point
# release copies them into debian. Only deb.debian.org and security.debian.org answer here.
DEBIAN_ARCHIVES = [
    "debian bookworm,bookworm-updates https://deb.debian.org/debian http://deb.debian.org/debian",
    "debian-security bookworm-security https://deb.debian.org/debian-security https://security.debian.org/debian-security http://security.debian.org/debian-security",
]
