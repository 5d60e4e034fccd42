"""chain_base_files: the files (path, sha256) a base must hold for a patch chain to apply."""

load(":patch_chain.bzl", "PatchChainInfo")

def _chain_base_files_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [
            "--declaration",
            ctx.attr.chain[PatchChainInfo].declaration.path,
            "--site",
            ctx.attr.site,
            "--fix",
            ctx.attr.fix,
            "--out",
            out.path,
        ],
        inputs = [ctx.attr.chain[PatchChainInfo].declaration],
        outputs = [out],
        mnemonic = "ChainBaseFiles",
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

chain_base_files = rule(
    implementation = _chain_base_files_impl,
    doc = "<name>.json in tools/oci/shallow_layout.py's format, for oci_pull(expect = ...).",
    attrs = {
        "chain": attr.label(providers = [PatchChainInfo], mandatory = True),
        "site": attr.string(mandatory = True, doc = "image path holding sglang/, e.g. usr/lib/python3/dist-packages"),
        "fix": attr.string(mandatory = True, doc = "the message's last line: how to get a base that holds them"),
        "_tool": attr.label(default = "//tools/patches/private:base_files", executable = True, cfg = "exec"),
    },
)
