"""Options the golden test receives from compose/BUILD.bazel (release record bindings)."""


def pytest_addoption(parser):
    parser.addoption("--release", action="append", default=[], metavar="NAME=PATH",
                     help="release record bound to a recipe name (from compose/BUILD.bazel)")
    parser.addoption("--compose-dir", default="compose",
                     help="directory of the committed compose files")
