"""Python distribution names as Bazel target names."""

def normalize(name):
    """PEP 503 normalization with `_` as the separator (Starlark has no regex)."""
    out = []
    prev_sep = False
    for ch in name.lower().elems():
        if ch in "-_.":
            if not prev_sep:
                out.append("_")
            prev_sep = True
        else:
            out.append(ch)
            prev_sep = False
    return "".join(out)
