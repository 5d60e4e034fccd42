"""Starlark access to the pin table (repository_locations.bzl): rows by name, never by value."""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")
load("//tools/oci:pull.bzl", "oci_pull")
load(":repository_locations.bzl", "PINS", "UNRESOLVED")

def pin(name):
    """The row `name` of the pin table."""
    if name not in PINS:
        fail("pins/repository_locations.bzl has no pin named %r; known: %s" % (name, ", ".join(sorted(PINS.keys()))))
    return PINS[name]

def pin_image(name):
    """`repository@sha256:...` of an image row; fails while the row is unresolved."""
    row = pin(name)
    if row["kind"] != "image":
        fail("pin %s is a %s, not an image" % (name, row["kind"]))
    if row["digest"] == UNRESOLVED:
        fail("pin %s (%s) is unresolved: run `bazel run //pins:resolve -- %s`" % (name, row["repository"], name))
    return row["repository"] + "@" + row["digest"]

def pin_http_archive(name, **kwargs):
    """http_archive(name) with the row's urls, sha256 and strip_prefix (a .whl is a zip)."""
    row = pin(name)
    if row["kind"] != "http_archive":
        fail("pin %s is a %s, not an http_archive" % (name, row["kind"]))
    if row["urls"][0].endswith(".whl"):
        kwargs["type"] = "zip"
    http_archive(
        name = name,
        urls = row["urls"],
        sha256 = row["sha256"],
        strip_prefix = row["strip_prefix"],
        **kwargs
    )

def _unpinned_image_impl(rctx):
    fail(("{name}: the image is unresolved in pins/repository_locations.bzl; pin it with " +
          "`bazel run //pins:resolve -- {name} --ref REGISTRY/REPO:TAG` (for the production base: " +
          "`bazel run //recipes/bases:pin_prod -- REGISTRY/REPO:TAG`), which resolves the tag's digest " +
          "with skopeo and writes the row. The default CPU base needs no pin.").format(name = rctx.name))

# Stands in for an unresolved image row: fetching it (for the production base only --config=prod
# does) fails with the command above instead of "no such package".
_unpinned_image = repository_rule(implementation = _unpinned_image_impl)

def pin_sglang_candidates():
    """{version: {wheel, url, sha256}} of the sglang_candidate rows (the bump check's candidates;
    patches/candidates.bzl adds the CPU base each one's stock tests run on)."""
    out = {}
    for name in sorted(PINS.keys()):
        row = PINS[name]
        if row["kind"] != "sglang_candidate":
            continue
        url = row["urls"][0]
        out[row["intended"]] = {
            "wheel": url.rsplit("/", 1)[-1],
            "url": url,
            "sha256": row["sha256"],
        }
    return out

def pin_oci_pull(name, **kwargs):
    """oci_pull(name, **kwargs) of an image row; while it is unresolved, a repository that explains itself."""
    row = pin(name)
    if row["digest"] == UNRESOLVED:
        _unpinned_image(name = name)
        return
    registry, _, repository = row["repository"].partition("/")
    oci_pull(name = name, registry = registry, repository = repository, digest = row["digest"], **kwargs)
