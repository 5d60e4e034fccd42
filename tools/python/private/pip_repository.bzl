"""Implementation of pip_parse: wheels from a hash-locked lock file, fetched through Bazel's
downloader (so `--repository_cache` makes re-fetches work offline), with a pip fallback that
honors the machine's pip configuration (mirrors, proxies, find-links)."""

load(":names.bzl", "normalize")

# The generated requirements.bzl loads it back from this repository ("@" = the main one).
_NAMES_BZL = Label("//tools/python/private:names.bzl")

# Reads the extracted wheels' METADATA: each package's dependency closure (see its docstring).
_WHEEL_GRAPH = Label("//tools/python/private:wheel_graph.py")

# A file no extracted site keeps. A TLS-intercepting proxy's installer appends its CA to every
# `certifi/cacert.pem` it finds on disk, the output base included, at any time (seen: a minute
# into `bazel test`, under a running test). So the bundle is in no site and no runfiles: nothing
# of the build is left for it to rewrite. `certifi.where()` still returns the path (importing
# certifi, requests or httpx reads no file), but nothing is there, so a TLS client that falls
# back to it fails loudly instead of trusting a rewritten file. The tools that speak TLS name the
# machine's CA store themselves (pins/resolve.py: SSL_CERT_FILE; docs/decisions.md).
_CA_BUNDLE = "cacert.pem"

_LOCK_HINT = "regenerate it with `./tools/bazel run //tools/python:lock -- {lock}`"

def _url_basename(url):
    name = url.split("#")[0].split("?")[0].rsplit("/", 1)[-1]
    return name.replace("%2B", "+").replace("%2b", "+")

def parse_lock(content, lock_name):
    """Returns [struct(name, version, sha256, urls, filename)] from a lock written by lock.py.

    Each entry is any `# mirror: <url>` lines, a `# url: <url>` line, then
    `name==version --hash=sha256:<hex>`; urls = the url, then the mirrors (tried in that order).
    """
    entries = []
    url = None
    mirrors = []
    for lineno, raw in enumerate(content.splitlines(), start = 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# url: "):
            url = line[len("# url: "):].strip()
            continue
        if line.startswith("# mirror: "):
            mirrors.append(line[len("# mirror: "):].strip())
            continue
        if line.startswith("#") or line.startswith("--"):
            continue
        parts = line.split(" ")
        req = parts[0]
        hashes = [p[len("--hash=sha256:"):] for p in parts[1:] if p.startswith("--hash=sha256:")]
        if "==" not in req or len(hashes) != 1 or url == None:
            fail("{lock}:{line}: expected `# url: ...` then `name==version --hash=sha256:<64 hex>`, got {got!r}; {hint}".format(
                lock = lock_name,
                line = lineno,
                got = line,
                hint = _LOCK_HINT.format(lock = lock_name),
            ))
        name, version = req.split("==", 1)
        if len(hashes[0]) != 64:
            fail("{lock}:{line}: sha256 of {name} is not 64 hex digits".format(lock = lock_name, line = lineno, name = name))
        entries.append(struct(
            name = normalize(name),
            version = version,
            sha256 = hashes[0],
            urls = [url] + mirrors,
            filename = _url_basename(url),
        ))
        url = None
        mirrors = []
    if not entries:
        fail("{lock}: no locked wheels; {hint}".format(lock = lock_name, hint = _LOCK_HINT.format(lock = lock_name)))
    return entries

def _pip_fallback(rctx, entry, lock_name):
    """Downloads one locked wheel with pip and the machine's pip configuration."""
    tmp = rctx.path("_pip_download/" + entry.name)
    res = rctx.execute([
        rctx.attr.python_interpreter,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--dest",
        str(tmp),
        "{}=={}".format(entry.name, entry.version),
    ], timeout = rctx.attr.timeout, quiet = rctx.attr.quiet)
    path = tmp.get_child(entry.filename)
    if res.return_code != 0 or not path.exists:
        fail("{lock}: cannot fetch {f} (sha256 {sha}) from {urls} nor with pip:\n{err}\nFix the network or pip configuration, or warm --repository_cache.".format(
            lock = lock_name,
            f = entry.filename,
            sha = entry.sha256,
            urls = entry.urls,
            err = res.stderr[-2000:],
        ))
    return "file://" + str(path)

def _fetch(rctx, entry, lock_name, extract):
    output = ("site/" + entry.name if extract else "wheels/" + entry.filename)
    kwargs = dict(output = output, sha256 = entry.sha256)
    fetch = rctx.download_and_extract if extract else rctx.download
    if extract:
        kwargs["type"] = "zip"

    # The downloader tries the urls in order (public index, then mirrors); sha256 keys the
    # repository cache, so a cached wheel is used whichever url it came from.
    result = fetch(url = entry.urls, allow_fail = True, **kwargs)
    if not result.success:
        # sha256 still guards the pip fallback: Bazel verifies it when it copies the file in.
        fetch(url = [_pip_fallback(rctx, entry, lock_name)], **kwargs)

def _drop_ca_bundles(rctx, lock_name):
    """Deletes every file named _CA_BUNDLE from the extracted sites."""
    res = rctx.execute(["find", "site", "-name", _CA_BUNDLE, "-delete"], quiet = True)
    if res.return_code != 0:
        fail("{}: deleting the extracted {} files failed:\n{}".format(lock_name, _CA_BUNDLE, res.stderr[-2000:]))

_BUILD_EXTRACTED = """\
package(default_visibility = ["//visibility:public"])

exports_files(["requirements.lock"])

# One library per locked package: requirement("x") = x and its dependency closure (from the
# wheels' Requires-Dist, tools/python/private/wheel_graph.py), so a target's runfiles hold what
# it imports and a changed wheel reaches only its users.
{packages}

# The whole environment (every package of the lock).
py_library(
    name = "pkgs",
    deps = {all_files},
)
"""

# One wheel's files; `site/<name>` is put on sys.path.
_FILES = """\
py_library(
    name = "_files_{name}",
    srcs = glob(["site/{name}/**/*.py"], exclude = ["site/{name}/**/* *"], allow_empty = True),
    data = glob(
        ["site/{name}/**"],
        exclude = ["site/{name}/**/*.py", "site/{name}/**/__pycache__/**", "site/{name}/bin/**", "site/{name}/**/* *"],
    ),
    imports = ["site/{name}"],
    visibility = ["//visibility:private"],
)

py_library(
    name = "{name}",
    deps = {closure},{unlocked}
)
"""

_BUILD_WHEELS = """\
package(default_visibility = ["//visibility:public"])

exports_files(["requirements.lock"])

# The locked wheels, unextracted: installed with pip (--no-index --require-hashes) by consumers.
filegroup(
    name = "wheels",
    srcs = glob(["wheels/*.whl"]),
)
{aliases}
"""

_REQUIREMENTS_BZL = """\
\"\"\"Generated by pip_parse from {lock}; do not edit.\"\"\"

load("{names_bzl}", "normalize")

_PACKAGES = {packages}

def requirement(name):
    key = normalize(name)
    if key not in _PACKAGES:
        fail("{{}} is not in {lock}: add it to its .in file and run `./tools/bazel run //tools/python:lock -- {short}`".format(name))
    return "@{repo}//:" + key

all_requirements = ["@{repo}//:" + p for p in _PACKAGES]
"""

def _build_extracted(rctx, lock_name):
    res = rctx.execute([rctx.attr.python_interpreter, str(rctx.path(_WHEEL_GRAPH)), "site"], quiet = True)
    if res.return_code != 0:
        fail("{}: reading the wheels' dependencies failed:\n{}".format(lock_name, res.stderr[-2000:]))
    graph = json.decode(res.stdout)
    packages = []
    for name in sorted(graph["closure"]):
        unlocked = graph["unlocked"].get(name)
        packages.append(_FILES.format(
            name = name,
            closure = repr([":_files_" + n for n in graph["closure"][name]]),
            unlocked = "\n    # Required but not in the lock (marker true here): {}".format(", ".join(unlocked)) if unlocked else "",
        ))
    return _BUILD_EXTRACTED.format(
        packages = "\n".join(packages),
        all_files = repr([":_files_" + n for n in sorted(graph["closure"])]),
    )

def _pip_parse_impl(rctx):
    lock_name = str(rctx.attr.requirements_lock).lstrip("@").replace("//", "").replace(":", "/")
    entries = parse_lock(rctx.read(rctx.path(rctx.attr.requirements_lock)), lock_name)
    rctx.report_progress("fetching {} locked wheels".format(len(entries)))
    for entry in entries:
        _fetch(rctx, entry, lock_name, rctx.attr.extract)
    rctx.delete("_pip_download")
    rctx.symlink(rctx.path(rctx.attr.requirements_lock), "requirements.lock")
    if rctx.attr.extract:
        _drop_ca_bundles(rctx, lock_name)
        rctx.file("BUILD.bazel", _build_extracted(rctx, lock_name))
    else:
        aliases = "\n".join(['alias(name = "{}", actual = ":wheels")'.format(e.name) for e in entries])
        rctx.file("BUILD.bazel", _BUILD_WHEELS.format(aliases = aliases))
    short = rctx.attr.requirements_lock.name.replace(".lock", "")
    rctx.file("requirements.bzl", _REQUIREMENTS_BZL.format(
        lock = lock_name,
        short = short,
        repo = rctx.attr.name,
        packages = repr(sorted([e.name for e in entries])),
        names_bzl = "@{}//{}:{}".format(_NAMES_BZL.workspace_name, _NAMES_BZL.package, _NAMES_BZL.name),
    ))
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.attr.name))

pip_repository = repository_rule(
    implementation = _pip_parse_impl,
    attrs = {
        "extract": attr.bool(default = True, doc = "Unzip wheels into one site dir (py_library); else keep .whl files."),
        "python_interpreter": attr.string(default = "/usr/bin/python3"),
        "quiet": attr.bool(default = True),
        "requirements_lock": attr.label(allow_single_file = True, mandatory = True),
        "timeout": attr.int(default = 600),
    },
    environ = ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"],
)
