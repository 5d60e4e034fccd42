"""The engine releases: one row per recipe, naming the patch series it carries.

The one list: recipes/BUILD.bazel builds one image (and its release targets) per row, on the
base of the SGLang version the series is written against (patches/series.bzl), each row has its
record recipes/releases/<name>.json, and compose/BUILD.bazel and validators/BUILD.bazel bind
those records to the generator and the validators. Add a series here, nowhere else. A release is
deployed only where a generators/tables variant names it: glm53_v4 (0.5.23) is a candidate that
none names.
"""

RELEASES = {
    "glm53_v1": "v1",
    "glm53_v2": "v2",
    "glm53_v3": "v3",
    "glm53_v4": "v4",
}

def release_record(name):
    """The label of a release's record."""
    return "//recipes/releases:%s.json" % name
