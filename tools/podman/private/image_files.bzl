"""image_files: a JSON file naming an image's files, all of them in runfiles."""

load("//tools/oci:defs.bzl", "OciImageInfo")
load("//tools/oci:internal.bzl", "image_runfiles_args")

def _image_files_impl(ctx):
    image = ctx.attr.image[OciImageInfo]
    args, files = image_runfiles_args(image, layout_flag = "--layout")
    out = ctx.actions.declare_file(ctx.label.name + ".json")
    ctx.actions.write(out, json.encode({
        "layout": image.layout.short_path,
        "digest": image.digest.short_path,
        "manifest": image.manifest.short_path,
        "config": image.config.short_path,
        "contents": image.contents.short_path,
        "blobs": [args[i + 1] for i in range(len(args)) if args[i] == "--blob"],
    }))
    files = files + [image.manifest, image.config, image.contents, out]
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = files))]

image_files = rule(
    implementation = _image_files_impl,
    doc = """<name>.json naming an image's layout, digest, manifest, config, contents and its
DESCRIPTOR=BLOB pairs (runfiles-relative), with all of them in runfiles: lets a test use an
image whose base layer blobs live outside its layout.""",
    attrs = {"image": attr.label(providers = [OciImageInfo], mandatory = True)},
)
