"""debian_packages: the .debs of one Debian lock as repository downloads (see tools/oci/debian/repositories.bzl)."""

# Plans the downloads from the lock and resolves drift (stdlib-only Python).
_DEBIAN_PY = Label("//tools/oci/debian:debian.py")

_BUILD = """\
package(default_visibility = ["//visibility:public"])

# What debian_rootfs_layer reads: the lock as used (drift recorded in it) and its .debs.
exports_files(["resolved.lock"])

filegroup(
    name = "debs",
    srcs = glob(["debs/*.deb"]),
)
"""

def _run(rctx, lock_name, args):
    res = rctx.execute([rctx.attr.python_interpreter, str(rctx.path(_DEBIAN_PY))] + args + ["--lock-name", lock_name], quiet = True)
    if res.return_code != 0:
        fail("{}: {}".format(lock_name, res.stderr.strip()[-3000:]))
    return json.decode(res.stdout)

def _debian_packages_impl(rctx):
    lock = rctx.path(rctx.attr.lock)
    lock_name = (rctx.attr.lock.package + "/" if rctx.attr.lock.package else "") + rctx.attr.lock.name
    plan = _run(rctx, lock_name, ["plan", "--lock", str(lock)])
    rctx.report_progress("fetching {} locked .debs".format(len(plan["debs"])))
    missing = []
    for deb in plan["debs"]:
        # sha256 makes every .deb a repository-cache entry: --repository_cache/--distdir serve it offline.
        result = rctx.download(url = deb["urls"], output = "debs/" + deb["file"], sha256 = deb["sha256"], allow_fail = True)
        if not result.success:
            missing.append(deb)
    args = ["resolve", "--lock", str(lock), "--out", "resolved.lock"]
    if missing:
        # The archive keeps only current versions: take them from today's Packages indexes.
        for index in plan["indexes"]:
            got = rctx.download(url = index["urls"], output = index["file"], allow_fail = True)
            if not got.success:
                fail(("{lock}: {debs} could not be downloaded from any mirror, and neither could {index} " +
                      "(to look for current versions): the network is unreachable? Fix the network or proxy, " +
                      "or warm --repository_cache / --distdir with the locked .debs (sha256 in the lock).").format(
                    lock = lock_name,
                    debs = ", ".join(["{}={}".format(d["name"], d["version"]) for d in missing]),
                    index = index["urls"][0],
                ))
            args += ["--index", "{}={}".format(index["archive"], rctx.path(index["file"]))]
        args += ["--missing=" + deb["name"] for deb in missing]
    resolved = _run(rctx, lock_name, args)
    for deb in resolved["debs"]:
        rctx.download(url = deb["urls"], output = "debs/" + deb["file"], sha256 = deb["sha256"])
    if resolved["drift"]:
        # Printed once per fetch (a repository rule has no other way to warn); the resolved lock
        # (an input of the layer action) and the layer's contents JSON (lock_current false,
        # drift) carry it into the action key and the record.
        # buildifier: disable=print
        print(("WARNING: {lock}: {n} locked version(s) are on no mirror; using the archive's current ones: {moved}.{notes} " +
               "Relock with `{relock}`; release builds (--config=release) refuse this.").format(
            lock = lock_name,
            relock = resolved["relock"],
            n = len(resolved["drift"]),
            moved = ", ".join(["{} {} -> {}".format(d["name"], d["locked"], d["used"]) for d in resolved["drift"]]),
            notes = (" Not in the lock: " + "; ".join(resolved["notes"]) + ".") if resolved["notes"] else "",
        ))
    rctx.delete("indexes")
    rctx.file("BUILD.bazel", _BUILD)
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.attr.name))

debian_packages = repository_rule(
    implementation = _debian_packages_impl,
    doc = "Downloads every .deb of a lock written by `debroot.py lock`; writes resolved.lock.",
    attrs = {
        "lock": attr.label(allow_single_file = True, mandatory = True),
        "python_interpreter": attr.string(default = "/usr/bin/python3"),
    },
)
