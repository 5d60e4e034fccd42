"""The Debian lock mode: a build setting and its provider."""

LockModeInfo = provider(
    doc = "Value of a lock-mode build setting.",
    fields = {"mode": "'soft' (warn on a stale lock and use current versions) or 'strict' (fail)"},
)

_MODES = ("soft", "strict")

def _lock_mode_impl(ctx):
    mode = ctx.build_setting_value
    if mode not in _MODES:
        fail("%s must be one of %s, got %r" % (ctx.label, _MODES, mode))
    return [LockModeInfo(mode = mode)]

lock_mode_flag = rule(
    implementation = _lock_mode_impl,
    build_setting = config.string(flag = True),
    doc = "How a soft lock (e.g. debian.lock) reacts to drift: soft = warn and use current versions, strict = fail.",
)
