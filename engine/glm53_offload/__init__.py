"""Keeps SGLang's HTTP event loop free for GLM-5.3: child processes for the long native calls
(prompt encoding, JSON body parsing, the multimodal processor), the shared-memory segments
they hand over and who owns them, and the event-loop stall dump.

The package is installed into the engine image as a layer of its own
(//engine/glm53_offload:layer). SGLang calls it from the hooks a patch series adds
(patches/v3 for SGLang 0.5.19, patches/v4 for 0.5.23); `sglang_support` names the SGLang versions it supports and
checks, when the server starts, that everything it calls in SGLang exists.

Importing the package, `offload_process` or `stall_dump` imports no sglang and no torch: a
child process runs `offload_process.py` as a script and starts in a fraction of a second.
"""
