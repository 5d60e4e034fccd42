"""patchchain: verify and apply an ordered, hash-pinned series of unified diffs to SGLang.

Recorded in every PROVENANCE; bump it when the applier's behaviour or output format changes.
"""

VERSION = "1.0.0"
