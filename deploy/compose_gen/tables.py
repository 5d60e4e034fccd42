"""Typed variant tables: TOML files loaded into frozen dataclasses, validated when loaded.

Every error names the table file, the TOML table and the row, and says what to write instead.
Checks that need release records (image capabilities) live in resolve.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from pins import table as pin_table
from tools.files import typed

from . import checks
from .errors import TableError

SERVICE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MARKER_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
DIST_INIT_RE = re.compile(r"^(?P<host>[0-9.]+|[a-z0-9.-]+):(?P<port>[0-9]{1,5})$")
RAM_BUDGET_RE = re.compile(r"^[1-9][0-9]*(?:GiB|MiB|TiB)$")
PLACEHOLDER_RE = re.compile(r"^\{(?P<name>[a-z_]+)\}$")
# Parts of config_variant that are derived from the row and its release; never typed.
DERIVED_VARIANT_RE = re.compile(r"(?:^|-)(?:qsplit|offloop(?:-v[0-9]+)?|c[0-9]+|pdi[0-9]+)(?:-|$)")

# Placeholders an argv token may use, and the flags whose value must be one.
SHARED_PLACEHOLDERS = ("model_path", "model_revision", "served_model_name", "chat_template",
                       "page_size", "port")
ROW_PLACEHOLDERS = ("chunked_prefill_size", "prefill_decode_interval", "dist_init_addr")
DERIVED_FLAGS = {
    "--model-path": "model_path",
    "--revision": "model_revision",
    "--served-model-name": "served_model_name",
    "--chat-template": "chat_template",
    "--page-size": "page_size",
    "--port": "port",
    "--chunked-prefill-size": "chunked_prefill_size",
    "--prefill-decode-interval": "prefill_decode_interval",
    "--dist-init-addr": "dist_init_addr",
}

# Derived flags the shared argv may leave out (the engine's own default applies).
OPTIONAL_DERIVED_FLAGS = ("--page-size",)

# The non-engine services of every file, each a row of [sidecars].
SIDECARS = ("model-downloader", "hf-cleanup", "nginx", "model-proxy-registrar", "proxy-glm53",
            "glm53-perception-check", "glm53-soak-relay", "dcgm-glm53", "otelcol-contrib")
# Env vars the generator derives; a table must not type them.
DERIVED_ENV = {
    "proxy-glm53": ("MODEL_NAME", "VLLM_BACKEND_URLS"),
    "model-proxy-registrar": ("MODEL_NAME", "LONG_TIER_ONLY", "LONG_HTTP_PORT", "LONG_MODEL_NAME",
                              "LONG_SERVER_NAME", "SERVER_NAME"),
    "hf-cleanup": ("MODEL_NAME",),
}
ENGINE_DERIVED_ENV = ("SGLANG_HICACHE_RAM_BUDGET", "SGLANG_DSA_INDEXER_QSPLIT")


# --- dataclasses ------------------------------------------------------------------------------

@dataclass(frozen=True)
class HfPin:
    """A Hugging Face repository at a commit (a row of the pin table; may be unresolved)."""
    pin: str
    repository: str
    revision: str


@dataclass(frozen=True)
class FilePin:
    """One file of a Hugging Face repository at a commit, with its sha256 (a pin table row)."""
    pin: str
    repository: str
    revision: str
    path: str
    sha256: str


@dataclass(frozen=True)
class Models:
    served_model_name: str
    hub_client: str
    checkpoints: Mapping[str, HfPin]
    chat_template: FilePin


@dataclass(frozen=True)
class Routing:
    server_name: str
    long_server_name: str
    long_model_name: str


@dataclass(frozen=True)
class Option:
    """One argv option: a flag and its value (None for a switch)."""
    flag: str
    value: str | None

    def tokens(self) -> tuple[str, ...]:
        return (self.flag,) if self.value is None else (self.flag, self.value)


Env = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Engine:
    page_size: int
    port: int
    cold_start_s: int  # the healthcheck's start_period: a model load that slow is still healthy
    command: tuple[str, ...]
    argv: tuple[Option, ...]
    environment: Env
    hicache_argv: tuple[Option, ...]
    hicache_environment: Env


@dataclass(frozen=True)
class Sidecar:
    name: str
    pin: str
    image: str  # repository@digest from the pin table (the sentinel while unresolved)
    environment: Env
    privileged_reason: str = ""  # why it runs privileged; empty: it does not


@dataclass(frozen=True)
class Telemetry:
    label_prefix: str
    scrape_interval: str
    scrape_timeout: str
    log_source: str


@dataclass(frozen=True)
class Common:
    path: str
    models: Models
    routing: Routing
    engine: Engine
    sidecars: Mapping[str, Sidecar]
    telemetry: Telemetry


@dataclass(frozen=True)
class DeploymentInfo:
    file: str
    title: str
    name: str
    checkpoint: str
    extra_downloads: tuple[str, ...]
    precision: str
    service_prefix: str
    hicache: bool
    long_tier: bool
    variant_prefix: str
    variant_features: tuple[str, ...]
    variant_suffix: str


@dataclass(frozen=True)
class EngineDelta:
    """What a deployment adds to the shared engine argv and environment."""
    argv: tuple[Option, ...]
    environment: Env


@dataclass(frozen=True)
class Replica:
    index: int
    gpus: tuple[int, ...]
    release: str
    chunked_prefill_size: int
    prefill_decode_interval: int
    dist_init_addr: str
    dsa_qsplit: bool
    hicache_ram_budget: str | None = None
    telemetry_markers: tuple[str, ...] = ()

    @property
    def row(self) -> str:
        return f"r{self.index}"

    @property
    def dist_init_port(self) -> int:
        return int(self.dist_init_addr.rsplit(":", 1)[1])


@dataclass(frozen=True)
class Deployment:
    path: str
    info: DeploymentInfo
    engine: EngineDelta
    replicas: tuple[Replica, ...]


# --- strict reading ---------------------------------------------------------------------------

class _Where:
    """Error context: table file, TOML table, row."""

    def __init__(self, table: str, section: str, row: str | None = None) -> None:
        self.table, self.section, self.row = table, section, row

    def error(self, message: str) -> TableError:
        return TableError(self.table, self.section, self.row, message)

    def sub(self, section: str, row: str | None = None) -> "_Where":
        return _Where(self.table, section, row)


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _pin(data: Mapping[str, Any], where: _Where, pins: pin_table.PinTable,
         kinds: tuple[str, ...]) -> pin_table.Pin:
    """The pin table row a table row names (`pin = "<row>"`)."""
    name = typed.string(data, "pin", where.error)
    try:
        pin = pins.get(name, f"{where.table} [{where.section}] {where.row or ''}".rstrip())
    except pin_table.PinError as err:
        raise where.error(str(err)) from None
    if pin.kind not in kinds:
        raise where.error(f"pin {name} is a {pin.kind}; this row needs a {' or '.join(kinds)}")
    return pin


def _environment(value: Any, where: _Where) -> Env:
    """An ordered env table: names checked, `$` forms checked, secrets must be interpolations."""
    data = typed.mapping(value, "environment", where.error)
    out = []
    for name, val in data.items():
        row = where.sub(where.section, name)
        if not checks.ENV_NAME_RE.match(name):
            raise row.error(f"env name {name!r} is not UPPER_SNAKE_CASE")
        if not isinstance(val, str):
            raise row.error(f"{name} must be a string (quote numbers: \"{val}\")")
        if checks.is_secret_name(name):
            problem = checks.secret_problem(name, val)
            if problem:
                raise row.error(problem)
        problem = checks.interpolation_problem(val)
        if problem:
            raise row.error(problem)
        out.append((name, val))
    return tuple(out)


def _argv(value: Any, where: _Where, allowed_placeholders: tuple[str, ...]) -> tuple[Option, ...]:
    if not isinstance(value, list):
        raise where.error("argv must be a list of [flag] or [flag, value] entries")
    options = []
    for i, entry in enumerate(value):
        if (not isinstance(entry, list) or not 1 <= len(entry) <= 2
                or not all(isinstance(t, str) for t in entry)):
            raise where.error(f"argv entry {i} ({entry!r}) must be [flag] or [flag, value]")
        flag = entry[0]
        val = entry[1] if len(entry) == 2 else None
        row = where.sub(where.section, flag)
        if not re.match(r"^--[a-z0-9][a-z0-9-]*$", flag):
            raise row.error(f"argv entry {i}: {flag!r} is not a --long-flag")
        if val is not None:
            ph = PLACEHOLDER_RE.match(val)
            if ph and ph.group("name") not in allowed_placeholders:
                raise row.error(f"unknown placeholder {val}; known: "
                                + ", ".join("{%s}" % p for p in allowed_placeholders))
            if "$" in val:
                raise row.error(f"{flag} value {val!r} has a '$': argv is not interpolated; "
                                "put host-dependent values in the environment")
        if flag in DERIVED_FLAGS:
            want = "{%s}" % DERIVED_FLAGS[flag]
            if val != want:
                raise row.error(f"{flag} is derived from the tables; write [\"{flag}\", "
                                f"\"{want}\"] (per-replica values belong in the replica rows)")
        options.append(Option(flag, val))
    return tuple(options)


def _check_unique_flags(groups: list[tuple[_Where, tuple[Option, ...]]]) -> None:
    seen: dict[str, _Where] = {}
    for where, options in groups:
        for opt in options:
            if opt.flag in seen:
                first = seen[opt.flag]
                raise where.sub(where.section, opt.flag).error(
                    f"{opt.flag} is already set in {first.table} [{first.section}]; each flag "
                    "appears once in an engine's argv")
            seen[opt.flag] = where


def _check_unique_env(groups: list[tuple[_Where, Env]]) -> None:
    seen: dict[str, _Where] = {}
    for where, env in groups:
        for name, _ in env:
            if name in ENGINE_DERIVED_ENV:
                raise where.sub(where.section, name).error(
                    f"{name} is derived from the replica rows (hicache_ram_budget, dsa_qsplit); "
                    "remove it")
            if name in seen:
                first = seen[name]
                raise where.sub(where.section, name).error(
                    f"{name} is already set in {first.table} [{first.section}]")
            seen[name] = where


# --- common.toml ------------------------------------------------------------------------------

def load_common(path: str | Path, display: str | None = None,
                pins: pin_table.PinTable | None = None) -> Common:
    """Reads common.toml; images and Hugging Face revisions come from the pin table rows it names."""
    path = Path(path)
    name = display or str(path)
    pins = pins if pins is not None else pin_table.load(display="pins/repository_locations.bzl")
    data = typed.load_toml(path, lambda m: TableError(name, "-", None, m))
    top = _Where(name, "(top level)")
    typed.check_keys(data, top.error, ("models", "routing", "engine", "sidecars", "telemetry"))

    # [models]
    w = top.sub("models")
    models = typed.mapping(data["models"], "[models]", w.error)
    typed.check_keys(models, w.error,
                     ("served_model_name", "hub_client", "checkpoints", "chat_template"))
    served = typed.string(models, "served_model_name", w.error, typed.HF_REPO_RE)
    hub_client = typed.string(models, "hub_client", w.error,
                              re.compile(r"^[a-z0-9_.\[\]-]+==[0-9][0-9a-z.]*$"),
                              " (pin the version: name[extras]==X.Y.Z)")
    if re.search(r"fp8|int4|w4a|bf16|awq|gptq", served, re.I):
        raise w.error(f"served_model_name {served!r} names a quantization; the served name "
                      "stays the same across checkpoints")
    checkpoints = {}
    for key, pin in typed.mapping(models["checkpoints"], "checkpoints", w.error).items():
        cw = top.sub("models.checkpoints", key)
        pin = typed.mapping(pin, "checkpoint", cw.error)
        typed.check_keys(pin, cw.error, ("pin",))
        row = _pin(pin, cw, pins, ("hf_model",))
        checkpoints[key] = HfPin(row.name, row.repository, row.revision)
    cw = top.sub("models.chat_template")
    tpl = typed.mapping(models["chat_template"], "chat_template", cw.error)
    typed.check_keys(tpl, cw.error, ("pin",))
    row = _pin(tpl, cw, pins, ("hf_file",))
    chat_template = FilePin(row.name, row.repository, row.revision, row.path, row.sha256)

    # [routing]
    w = top.sub("routing")
    routing = typed.mapping(data["routing"], "[routing]", w.error)
    typed.check_keys(routing, w.error, _field_names(Routing))
    host_re = re.compile(r"^[a-z0-9.-]+$")
    routing_t = Routing(typed.string(routing, "server_name", w.error, host_re),
                        typed.string(routing, "long_server_name", w.error, host_re),
                        typed.string(routing, "long_model_name", w.error, typed.HF_REPO_RE))

    # [engine]
    w = top.sub("engine")
    eng = typed.mapping(data["engine"], "[engine]", w.error)
    typed.check_keys(eng, w.error, ("page_size", "port", "cold_start_s", "command", "argv",
                                    "environment", "hicache"))
    allowed = SHARED_PLACEHOLDERS + ROW_PLACEHOLDERS
    argv = _argv(eng["argv"], w, allowed)
    missing = [f for f in DERIVED_FLAGS
               if f not in {o.flag for o in argv} and f not in OPTIONAL_DERIVED_FLAGS]
    if missing:
        raise w.error(f"argv lacks {', '.join(missing)}; these carry the per-replica and "
                      "per-deployment values")
    hw = top.sub("engine.hicache")
    hicache = typed.mapping(eng["hicache"], "[engine.hicache]", hw.error)
    typed.check_keys(hicache, hw.error, ("argv", "environment"))
    hicache_argv = _argv(hicache["argv"], hw, ())
    env = _environment(eng["environment"], top.sub("engine.environment"))
    hicache_env = _environment(hicache["environment"], top.sub("engine.hicache.environment"))
    _check_unique_flags([(w, argv), (hw, hicache_argv)])
    _check_unique_env([(top.sub("engine.environment"), env),
                       (top.sub("engine.hicache.environment"), hicache_env)])
    engine = Engine(
        page_size=typed.integer(eng, "page_size", w.error),
        port=typed.integer(eng, "port", w.error),
        cold_start_s=typed.integer(eng, "cold_start_s", w.error),
        command=typed.string_list(eng, "command", w.error),
        argv=argv,
        environment=env,
        hicache_argv=hicache_argv,
        hicache_environment=hicache_env,
    )
    if not engine.command:
        raise w.error("command must not be empty")

    # [sidecars]
    sidecars_raw = typed.mapping(data["sidecars"], "[sidecars]", top.sub("sidecars").error)
    sidecars: dict[str, Sidecar] = {}
    for sname, row in sidecars_raw.items():
        sw = top.sub("sidecars", sname)
        if sname not in SIDECARS:
            raise sw.error(f"unknown sidecar {sname!r}; known: {', '.join(SIDECARS)}")
        row = typed.mapping(row, "sidecar", sw.error)
        typed.check_keys(row, sw.error, ("pin",), ("environment", "privileged_reason"))
        reason = row.get("privileged_reason", "")
        if not isinstance(reason, str) or ("privileged_reason" in row and not reason.strip()):
            raise top.sub(f"sidecars.{sname}", "privileged_reason").error(
                "privileged_reason must be a non-empty string saying what needs the privilege")
        senv = _environment(row.get("environment", {}), top.sub(f"sidecars.{sname}.environment"))
        for derived in DERIVED_ENV.get(sname, ()):
            if derived in dict(senv):
                raise top.sub(f"sidecars.{sname}.environment", derived).error(
                    f"{derived} is derived by the generator; remove it from the table")
        image_pin = _pin(row, sw, pins, ("image",))
        sidecars[sname] = Sidecar(sname, image_pin.name, image_pin.image, senv, reason)
    missing = [s for s in SIDECARS if s not in sidecars]
    if missing:
        raise top.sub("sidecars").error(f"missing sidecar row(s): {', '.join(missing)}")

    # [telemetry]
    w = top.sub("telemetry")
    tel = typed.mapping(data["telemetry"], "[telemetry]", w.error)
    typed.check_keys(tel, w.error, _field_names(Telemetry))
    duration = re.compile(r"^[1-9][0-9]*s$")
    telemetry = Telemetry(typed.string(tel, "label_prefix", w.error, re.compile(r"^[a-z0-9.]+\.$")),
                          typed.string(tel, "scrape_interval", w.error, duration),
                          typed.string(tel, "scrape_timeout", w.error, duration),
                          typed.string(tel, "log_source", w.error, MARKER_RE))

    return Common(
        path=name,
        models=Models(served, hub_client, MappingProxyType(checkpoints), chat_template),
        routing=routing_t,
        engine=engine,
        sidecars=MappingProxyType(sidecars),
        telemetry=telemetry,
    )


# --- deployment tables ------------------------------------------------------------------------

def _replica(row: Mapping[str, Any], position: int, where: _Where, page_size: int,
             hicache: bool) -> Replica:
    index = row.get("index")
    label = f"r{index}" if isinstance(index, int) and not isinstance(index, bool) else f"#{position}"
    w = where.sub("replicas", label)
    required = ("index", "gpus", "release", "chunked_prefill_size", "prefill_decode_interval",
                "dist_init_addr", "dsa_qsplit")
    typed.check_keys(row, w.error, required, ("hicache_ram_budget", "telemetry_markers"))
    index = typed.integer(row, "index", w.error)
    gpus = row["gpus"]
    if (not isinstance(gpus, list) or not gpus
            or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 64
                       for g in gpus)):
        raise w.error(f"gpus must be a non-empty list of GPU indices, got {gpus!r}")
    if len(set(gpus)) != len(gpus):
        raise w.error(f"gpus {gpus!r} lists a GPU twice")
    release = typed.string(row, "release", w.error, re.compile(r"^glm53_v[0-9]+$"),
                   " (a recipe name; its image comes from recipes/releases/<name>.json)")
    chunk = typed.integer(row, "chunked_prefill_size", w.error)
    if chunk % page_size:
        lower, upper = chunk - chunk % page_size, chunk - chunk % page_size + page_size
        raise w.error(f"chunked_prefill_size {chunk} is not a multiple of the page size "
                      f"{page_size} ([engine] page_size); use {lower or upper} or {upper}")
    pdi = typed.integer(row, "prefill_decode_interval", w.error)
    dist = typed.string(row, "dist_init_addr", w.error, DIST_INIT_RE, " (host:port)")
    port = int(dist.rsplit(":", 1)[1])
    if not 1024 <= port <= 65535:
        raise w.error(f"dist_init_addr port {port} is outside 1024-65535")
    qsplit = typed.boolean(row, "dsa_qsplit", w.error)
    budget = None
    if "hicache_ram_budget" in row:
        budget = typed.string(row, "hicache_ram_budget", w.error, RAM_BUDGET_RE, " (e.g. 406GiB)")
    if hicache and budget is None:
        raise w.error("hicache_ram_budget is required: this deployment has hicache = true")
    if not hicache and budget is not None:
        raise w.error("hicache_ram_budget is set but this deployment has hicache = false; "
                      "remove it")
    markers = typed.string_list(row, "telemetry_markers", w.error, MARKER_RE)
    for m in markers:
        if DERIVED_VARIANT_RE.search(m):
            raise w.error(f"telemetry marker {m!r} is derived (qsplit/offloop/c<chunk>/"
                          "pdi<n>); remove it")
    return Replica(index, tuple(gpus), release, chunk, pdi, dist, qsplit, budget, markers)


def load_deployment(path: str | Path, common: Common, display: str | None = None) -> Deployment:
    path = Path(path)
    name = display or str(path)
    data = typed.load_toml(path, lambda m: TableError(name, "-", None, m))
    top = _Where(name, "(top level)")
    typed.check_keys(data, top.error, ("deployment", "engine", "replicas"))

    w = top.sub("deployment")
    dep = typed.mapping(data["deployment"], "[deployment]", w.error)
    typed.check_keys(dep, w.error, _field_names(DeploymentInfo))
    checkpoint = typed.string(dep, "checkpoint", w.error)
    if checkpoint not in common.models.checkpoints:
        raise w.error(f"checkpoint {checkpoint!r} is not in {common.path} [models.checkpoints] "
                      f"({', '.join(common.models.checkpoints)})")
    extra = typed.string_list(dep, "extra_downloads", w.error)
    for e in extra:
        if e not in common.models.checkpoints or e == checkpoint:
            raise w.error(f"extra_downloads entry {e!r} must be another checkpoint of "
                          f"[models.checkpoints]")
    info = DeploymentInfo(
        file=typed.string(dep, "file", w.error, re.compile(r"^[A-Za-z0-9.-]+\.yaml$")),
        title=typed.string(dep, "title", w.error),
        name=typed.string(dep, "name", w.error, MARKER_RE),
        checkpoint=checkpoint,
        extra_downloads=extra,
        precision=typed.string(dep, "precision", w.error, MARKER_RE),
        service_prefix=typed.string(dep, "service_prefix", w.error,
                                    re.compile(r"^[a-z0-9][a-z0-9-]*-r$"),
                                    " (ends in -r; the replica index follows)"),
        hicache=typed.boolean(dep, "hicache", w.error),
        long_tier=typed.boolean(dep, "long_tier", w.error),
        variant_prefix=typed.string(dep, "variant_prefix", w.error, MARKER_RE),
        variant_features=typed.string_list(dep, "variant_features", w.error, MARKER_RE),
        variant_suffix=typed.string(dep, "variant_suffix", w.error, MARKER_RE),
    )
    for key, part in (("variant_prefix", info.variant_prefix),
                      ("variant_suffix", info.variant_suffix),
                      *(("variant_features", f) for f in info.variant_features)):
        if DERIVED_VARIANT_RE.search(part):
            raise w.error(f"{key} {part!r} contains a derived config_variant part "
                          "(qsplit/offloop/c<chunk>/pdi<n>); those come from the replica rows")

    w = top.sub("engine")
    eng = typed.mapping(data["engine"], "[engine]", w.error)
    typed.check_keys(eng, w.error, (), ("argv", "environment"))
    argv = _argv(eng.get("argv", []), w, SHARED_PLACEHOLDERS)
    env = _environment(eng.get("environment", {}), top.sub("engine.environment"))
    cw = _Where(common.path, "engine")
    _check_unique_flags([(cw, common.engine.argv),
                         (_Where(common.path, "engine.hicache"),
                          common.engine.hicache_argv if info.hicache else ()),
                         (w, argv)])
    _check_unique_env([(_Where(common.path, "engine.environment"), common.engine.environment),
                       (_Where(common.path, "engine.hicache.environment"),
                        common.engine.hicache_environment if info.hicache else ()),
                       (top.sub("engine.environment"), env)])

    rows = data["replicas"]
    if not isinstance(rows, list) or not rows:
        raise top.sub("replicas").error("needs at least one [[replicas]] row")
    replicas = tuple(_replica(typed.mapping(r, "replica row", top.sub("replicas", f"#{i + 1}").error),
                              i + 1, top, common.engine.page_size, info.hicache)
                     for i, r in enumerate(rows))
    _check_rows(replicas, top, common)
    return Deployment(name, info, EngineDelta(argv, env), replicas)


def _check_rows(replicas: tuple[Replica, ...], top: _Where, common: Common) -> None:
    """Cross-row rules: unique indices, disjoint GPUs, unique dist-init ports, TP = #GPUs."""
    by_index: dict[int, Replica] = {}
    gpu_owner: dict[int, Replica] = {}
    port_owner: dict[int, Replica] = {}
    tp = next((o.value for o in common.engine.argv if o.flag == "--tp-size"), None)
    for r in replicas:
        w = top.sub("replicas", r.row)
        if r.index in by_index:
            raise w.error(f"index {r.index} is used by two rows")
        by_index[r.index] = r
        for g in r.gpus:
            if g in gpu_owner:
                raise w.error(f"GPU {g} is already used by row {gpu_owner[g].row}; give each "
                              "replica its own GPUs")
            gpu_owner[g] = r
        if r.dist_init_port in port_owner:
            raise w.error(f"dist_init_addr port {r.dist_init_port} is already used by row "
                          f"{port_owner[r.dist_init_port].row}; each replica's torch.distributed "
                          "rendezvous needs its own port")
        port_owner[r.dist_init_port] = r
        if tp is not None and len(r.gpus) != int(tp):
            raise w.error(f"{len(r.gpus)} GPUs but the engine runs --tp-size {tp}")
    expected = list(range(1, len(replicas) + 1))
    if sorted(by_index) != expected:
        raise top.sub("replicas").error(f"indices {sorted(by_index)} must be {expected}")
