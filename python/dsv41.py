"""dsv41 - DeepSeek-V4.1 inference from Python, over the C library libdsv41.so (ctypes, no build step).

The library is loaded from $DSV41_LIB when it is set (a path to libdsv41.so), else from the
system's library path (after `make install`).

    import dsv41
    m = dsv41.Model()                        # the built-in tiny model (no files)
    m.generate([2, 17, 47], 16)              # 16 ids, greedy, as `dsv41 run --ids 2,17,47 -n 16`
    m = dsv41.Model("path/to/checkpoint")    # config.json, safetensors shards, tokenizer.json
    m.tokenize("Hello")
    m.chat("Hello", max_tokens=64)           # the whole reply
    for piece in m.stream("Hello"): ...      # the reply as it is generated
"""
import ctypes
import ctypes.util
import os
import time

__all__ = ["Model", "Error", "version", "kernel_sets"]


class Error(Exception):
    """A failure the library reported (its one-line message)."""


def _load():
    path = os.environ.get("DSV41_LIB") or ctypes.util.find_library("dsv41")
    if not path:
        raise ImportError("dsv41: libdsv41.so not found: run `make install` or set DSV41_LIB to its path")
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError("dsv41: cannot load %s: %s" % (path, e)) from None


_lib = _load()
_c = ctypes
_P = _c.c_void_p
_I32P = _c.POINTER(_c.c_int32)
_F32P = _c.POINTER(_c.c_float)


class _SamplerParams(_c.Structure):
    _fields_ = [("temperature", _c.c_float), ("top_k", _c.c_int32), ("top_p", _c.c_float), ("min_p", _c.c_float),
                ("seed", _c.c_uint64), ("repeat_penalty", _c.c_float), ("presence_penalty", _c.c_float),
                ("frequency_penalty", _c.c_float), ("penalty_last_n", _c.c_int32)]


class _ChatMessage(_c.Structure):
    _fields_ = [("role", _c.c_char_p), ("content", _c.c_char_p), ("reasoning_content", _c.c_char_p)]


class _ChatOptions(_c.Structure):
    _fields_ = [("thinking", _c.c_int32), ("reasoning_effort", _c.c_int32)]


class _Utf8Stream(_c.Structure):
    _fields_ = [("pending", _c.c_ubyte * 8), ("n", _c.c_int32)]


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_error = _fn("dsv41_error", _c.c_char_p)
_version = _fn("dsv41_version", _c.c_char_p)
_kernel_sets = _fn("dsv41_kernel_sets", _c.c_int32, _c.POINTER(_c.c_char_p), _c.c_int32)
_model_builtin = _fn("dsv41_model_builtin", _P)
_model_load = _fn("dsv41_model_load", _P, _c.c_char_p)
_model_free = _fn("dsv41_model_free", None, _P)
_vocab_size = _fn("dsv41_model_vocab_size", _c.c_int32, _P)
_max_seq_len = _fn("dsv41_model_max_seq_len", _c.c_int32, _P)
_session_new = _fn("dsv41_session_new", _P, _P)
_session_free = _fn("dsv41_session_free", None, _P)
_forward = _fn("dsv41_session_forward", _c.c_int, _P, _I32P, _c.c_int32, _F32P, _P)
_params_default = _fn("dsv41_sampler_params_default", _SamplerParams)
_sampler_new = _fn("dsv41_sampler_new", _P, _c.POINTER(_SamplerParams), _c.c_int32)
_sampler_free = _fn("dsv41_sampler_free", None, _P)
_sample = _fn("dsv41_sample", _c.c_int32, _P, _F32P)
_penalties = _fn("dsv41_apply_penalties", _c.c_int, _c.POINTER(_SamplerParams), _I32P, _c.c_int32, _F32P, _c.c_int32)
_logprob = _fn("dsv41_logprob", _c.c_float, _F32P, _c.c_int32, _c.c_int32)
_tok_load_dir = _fn("dsv41_tokenizer_load_dir", _P, _c.c_char_p)
_tok_free = _fn("dsv41_tokenizer_free", None, _P)
_tok_eos = _fn("dsv41_tokenizer_eos", _c.c_int32, _P)
_tok_bos = _fn("dsv41_tokenizer_bos", _c.c_int32, _P)
_tok_find = _fn("dsv41_tokenizer_find", _c.c_int32, _P, _c.c_char_p)
_tokenize = _fn("dsv41_tokenize", _c.c_int64, _P, _c.c_char_p, _c.c_size_t, _c.c_int, _I32P, _c.c_int64)
_in_reply = _fn("dsv41_token_in_reply", _c.c_int, _P, _c.c_int32)
_detokenize = _fn("dsv41_detokenize", _c.c_int64, _P, _c.POINTER(_Utf8Stream), _c.c_int32, _c.c_char_p, _c.c_int64)
_stop_find = _fn("dsv41_stop_find", _c.c_int64, _c.c_char_p, _c.c_size_t, _c.c_size_t, _c.POINTER(_c.c_char_p), _c.c_int32,
                 _c.POINTER(_c.c_size_t))
_render = _fn("dsv41_chat_render_messages", _c.c_void_p, _c.POINTER(_ChatMessage), _c.c_int32, _c.POINTER(_ChatOptions))
_libc_free = ctypes.CDLL(None).free  # the library's strings are malloc'd
_libc_free.argtypes, _libc_free.restype = [_P], None


def _fail():
    raise Error(_error().decode("utf-8", "replace"))


def version():
    """The library's version, e.g. "0.1.0"."""
    return _version().decode()


def kernel_sets():
    """The kernel sets this CPU runs, slowest first; the last is the default."""
    names = (_c.c_char_p * 8)()
    return [names[i].decode() for i in range(min(_kernel_sets(names, 8), 8))]


_EFFORT = {"low": 50, "high": 75, "max": 100}


class Model:
    """A model and its tokenizer. Model() is the built-in tiny model; Model(DIR) a checkpoint."""

    def __init__(self, path=None):
        self._m = self._tok = None
        self._m = _model_builtin() if path is None else _model_load(os.fsencode(path))
        if not self._m:
            _fail()
        self.path = path
        self.vocab_size = _vocab_size(self._m)
        self.context = _max_seq_len(self._m)

    def close(self):
        if self._tok:
            _tok_free(self._tok)
        if self._m:
            _model_free(self._m)
        self._m = self._tok = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    # ---- tokens
    def _tokenizer(self):
        if not self._tok:
            if self.path is None:
                raise Error("the built-in model has no tokenizer: use token ids, or Model(DIR)")
            self._tok = _tok_load_dir(os.fsencode(self.path))
            if not self._tok:
                _fail()
        return self._tok

    @property
    def eos(self):
        """The end-of-sentence id (-1 when the tokenizer has none)."""
        return _tok_eos(self._tokenizer())

    @property
    def bos(self):
        return _tok_bos(self._tokenizer())

    def tokenize(self, text, special=False):
        """The ids of text; with special=True, special-token spellings become their ids."""
        t, raw = self._tokenizer(), text.encode("utf-8")
        n = _tokenize(t, raw, len(raw), int(special), None, 0)
        if n < 0:
            _fail()
        ids = (_c.c_int32 * max(n, 1))()
        _tokenize(t, raw, len(raw), int(special), ids, n)
        return list(ids[:n])

    def detokenize(self, ids):
        """The text of ids (special tokens included)."""
        return "".join(self._pieces(ids, True))

    def _pieces(self, ids, special):
        """The text of ids as it becomes complete; an unfinished character at the end is U+FFFD."""
        t, st, out = self._tokenizer(), _Utf8Stream(), _c.create_string_buffer(4096)
        for i in ids:
            if not special and not _in_reply(t, i):  # special tokens, but those that mark the reply's parts
                continue
            n = _detokenize(t, _c.byref(st), i, out, len(out))
            if n > 0:  # an id the tokenizer lacks (the model's vocabulary may be larger) shows nothing
                yield out.raw[:n].decode("utf-8")
        if st.n:
            yield "\ufffd"

    # ---- generation
    @staticmethod
    def _params(temperature, top_k, top_p, min_p, seed, repeat_penalty, presence_penalty, frequency_penalty,
                repeat_last_n):
        p = _params_default()
        p.temperature, p.top_k, p.top_p, p.min_p = temperature, top_k, top_p, min_p
        p.seed = int(time.time()) if seed is None else seed
        p.repeat_penalty, p.presence_penalty, p.frequency_penalty = repeat_penalty, presence_penalty, frequency_penalty
        p.penalty_last_n = repeat_last_n
        return p

    def _tokens(self, ids, n, p, stop=None, logprobs=None):
        """Yields up to n sampled ids after the prompt ids (stopping before stop, at the context)."""
        V = self.vocab_size
        if len(ids) + 1 > self.context:
            raise Error("%d prompt tokens leave no room in the context of %d" % (len(ids), self.context))
        s = _session_new(self._m)
        smp = _sampler_new(_c.byref(p), V)
        try:
            if not s or not smp:
                _fail()
            hist = (_c.c_int32 * self.context)(*ids)
            logits = (_c.c_float * V)()
            if _forward(s, hist, len(ids), logits, None):
                _fail()
            pos = len(ids)
            for i in range(n):
                if _penalties(_c.byref(p), hist, pos, logits, V):
                    _fail()
                nxt = _sample(smp, logits)
                if logprobs is not None:
                    logprobs.append(_logprob(logits, V, nxt))
                if nxt == stop:
                    return
                yield nxt
                hist[pos] = nxt
                pos += 1
                if i + 1 == n or pos >= self.context:
                    return
                one = (_c.c_int32 * 1)(nxt)
                if _forward(s, one, 1, logits, None):
                    _fail()
        finally:
            _sampler_free(smp)
            _session_free(s)

    def generate(self, ids, n, temperature=0.0, top_k=0, top_p=0.95, min_p=0.0, seed=0, repeat_penalty=1.0,
                 presence_penalty=0.0, frequency_penalty=0.0, repeat_last_n=64, logprobs=None):
        """n ids after the prompt ids, greedy unless a temperature is given (the same ids as
        `dsv41 run --ids`); stops early at the context. logprobs, a list, receives each
        chosen id's log-probability."""
        p = self._params(temperature, top_k, top_p, min_p, seed, repeat_penalty, presence_penalty, frequency_penalty,
                         repeat_last_n)
        return list(self._tokens(list(ids), n, p, None, logprobs))

    def render(self, messages, thinking=False, effort=None):
        """The V4.1 prompt of messages ([{"role", "content", "reasoning_content"?}] or one user
        string), in chat mode unless thinking."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        arr = (_ChatMessage * max(len(messages), 1))()
        for i, m in enumerate(messages):
            rc = m.get("reasoning_content")
            arr[i] = _ChatMessage(m["role"].encode(), m["content"].encode(), rc.encode() if rc is not None else None)
        eff = _EFFORT.get(effort, effort) if effort is not None else 0
        opts = _ChatOptions(int(bool(thinking)), int(eff))
        ptr = _render(arr, len(messages), _c.byref(opts))
        if not ptr:
            _fail()
        text = _c.string_at(ptr).decode("utf-8")
        _libc_free(ptr)
        return text

    def stream(self, messages, max_tokens=None, thinking=False, effort=None, temperature=0.6, top_k=0, top_p=0.95,
               min_p=0.0, seed=None, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
               repeat_last_n=64, special=False, stop=None):
        """Yields the reply to messages as text pieces, until EOS, max_tokens, the context or
        stop (a string or a list of up to 8: the reply ends before the earliest, as `--stop`).
        Defaults are `dsv41 run -p`'s (seed None: the clock)."""
        ids = self.tokenize(self.render(messages, thinking, effort), special=True)
        p = self._params(temperature, top_k, top_p, min_p, seed, repeat_penalty, presence_penalty, frequency_penalty,
                         repeat_last_n)
        n = self.context if max_tokens is None else max_tokens
        pieces = self._pieces(self._tokens(ids, n, p, self.eos), special)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if not stops:
            yield from pieces
            return
        arr = (_c.c_char_p * len(stops))(*[s.encode("utf-8") for s in stops])
        text, sent, held = b"", 0, _c.c_size_t()
        try:
            for piece in pieces:  # whole characters: a stop or a held-back tail starts at one
                prev, text = len(text), text + piece.encode("utf-8")
                cut = _stop_find(text, len(text), prev, arr, len(stops), _c.byref(held))
                end = cut if cut >= 0 else len(text) - held.value
                if end > sent:
                    yield text[sent:end].decode("utf-8")
                    sent = end
                if cut >= 0:
                    return
            if len(text) > sent:  # what could have begun a stop string
                yield text[sent:].decode("utf-8")
        finally:
            pieces.close()

    def chat(self, messages, **kw):
        """The whole reply to messages (the keywords of stream)."""
        return "".join(self.stream(messages, **kw))
