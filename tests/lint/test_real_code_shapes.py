"""Real code shapes whose verdict depends on where they sit (file name, decorator, branch)."""

from __future__ import annotations

from pathlib import Path

from maskcheck.lint.runner import lint_file

ALL = frozenset({"MC501", "MC510", "MC512"})

# vllm tests/kernels/attention/test_minimax_m3_indexer_cp.py:243: a float32 reference's sentinel
# in a test module that also runs bfloat16 kernels.
REFERENCE = '''import torch


def force_scores(scores, valid):
    cache = torch.randn(4, 8, dtype=torch.bfloat16)
    forced = scores.clone()
    forced[:, 0] = torch.where(valid, forced[:, 0], torch.full_like(forced[:, 0], -1e30))
    return forced, cache
'''


def _codes(path: Path, source: str) -> list[str]:
    path.write_text(source)
    report = lint_file(str(path), ALL)
    assert report.error is None, report.error
    return [f.code for f in report.findings]


def test_a_raising_fill_in_a_test_module_is_not_reported(tmp_path: Path) -> None:
    # In a test, a fill that raises on float16 fails on its first float16 run: it cannot hide.
    assert _codes(tmp_path / "test_indexer.py", REFERENCE) == []


def test_the_same_fill_outside_tests_is_reported(tmp_path: Path) -> None:
    assert _codes(tmp_path / "indexer.py", REFERENCE) == ["MC501"]


def test_an_additive_mask_in_a_test_module_is_still_reported(tmp_path: Path) -> None:
    # `mask * -1e9` does not raise in float16 (it becomes -inf): a test can carry it silently.
    source = ("import torch\n\n\ndef check(scores, pad_mask):\n"
              "    x = scores.half()\n"
              "    return x + pad_mask * -1e9\n")
    assert _codes(tmp_path / "test_attention.py", source) == ["MC501"]


def test_only_kernel_decorators_hide_a_function(tmp_path: Path) -> None:
    body = ("def f(scores, keep):\n    m = keep.bool()\n    return scores * (1 - m)\n")
    kernel = "import torch\nimport triton\n\n\n@triton.jit\n" + body
    compiled = "import torch\n\n\n@torch.compile\n" + body
    assert _codes(tmp_path / "kernel.py", kernel) == []
    assert _codes(tmp_path / "compiled.py", compiled) == ["MC512"]


def test_a_flag_true_in_both_branches_is_still_true(tmp_path: Path) -> None:
    # The join keeps what both branches agree on: the cache bug is still found.
    source = ("import torch\nimport torch.nn.functional as F\n\n\n"
              "def attend(q, k, v, past_k, fast):\n"
              "    k = torch.cat([past_k, k], dim=-2)\n"
              "    if fast:\n        causal = True\n    else:\n        causal = True\n"
              "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")
    assert _codes(tmp_path / "attend.py", source) == ["MC510"]


def test_a_flag_set_in_one_branch_only_keeps_its_evidence(tmp_path: Path) -> None:
    source = ("import torch\nimport torch.nn.functional as F\n\n\n"
              "def attend(q, k, v, past_k):\n"
              "    causal = False\n"
              "    if past_k is not None:\n"
              "        k = torch.cat([past_k, k], dim=-2)\n        causal = True\n"
              "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")
    assert _codes(tmp_path / "attend.py", source) == ["MC510"]


# sentence-transformers util/similarity.py:549: a helper whose every caller passes float32.
HELPER = '''import torch


def maxsim(a, b, b_mask):
    scores = torch.einsum("bsh,bth->bst", a, b)
    scores = scores.max(dim=-1).values.float()
    scores = scores.sum(dim=-1)
    if b_mask is not None:
        scores = _fill_empty(scores, ~b_mask.bool().any(dim=-1))
    return scores


def _fill_empty(scores, empty):
    return scores.masked_fill(empty, -1e9)


class Scorer:
    def empty_docs(self, n, empty):
        return _fill_empty(torch.zeros(n, dtype=torch.DTYPE), empty)
'''


def test_a_helper_given_float32_by_every_caller_is_silent(tmp_path: Path) -> None:
    assert _codes(tmp_path / "similarity.py", HELPER.replace("DTYPE", "float32")) == []


def test_a_helper_given_float16_by_one_caller_is_reported(tmp_path: Path) -> None:
    assert _codes(tmp_path / "similarity.py", HELPER.replace("DTYPE", "float16")) == ["MC501"]


def test_a_helper_nobody_in_the_file_calls_is_reported(tmp_path: Path) -> None:
    source = "import torch\n\n\ndef _fill_empty(scores, empty):\n" + (
        "    return scores.masked_fill(empty, -1e9)\n")
    assert _codes(tmp_path / "fill.py", source) == ["MC501"]


def test_a_dtype_that_is_not_known_is_not_float32(tmp_path: Path) -> None:
    # `torch.zeros(n, dtype=x.dtype)` follows x: only a missing dtype= means torch's default.
    source = HELPER.replace("torch.DTYPE", "scores_dtype").replace(
        "def empty_docs(self, n, empty)", "def empty_docs(self, n, empty, scores_dtype)")
    assert _codes(tmp_path / "similarity.py", source) == ["MC501"]


def test_a_method_given_float32_through_self_is_silent(tmp_path: Path) -> None:
    source = ("import torch\n\n\nclass Head:\n"
              "    def _fill(self, logits, pad):\n"
              "        return logits.masked_fill(pad, -1e9)\n\n"
              "    def forward(self, x, pad):\n"
              "        return self._fill(x.float(), pad)\n")
    assert _codes(tmp_path / "head.py", source) == []
    assert _codes(tmp_path / "head2.py", source.replace("x.float()", "x")) == ["MC501"]


def test_kernel_decorators_are_told_from_torch_ones(tmp_path: Path) -> None:
    body = ("def f(scores, keep):\n    m = keep.bool()\n    return scores * (1 - m)\n")
    for decorator in ("@cuda.jit", "@T.prim_func", "@jit", "@triton.autotune(configs=[])"):
        assert _codes(tmp_path / "k.py", f"import torch\n\n\n{decorator}\n{body}") == [], decorator
    for decorator in ("@T.no_grad()", "@torch.jit.script", "@th.jit.ignore"):
        source = f"import torch as T\nimport torch as th\nimport torch\n\n\n{decorator}\n{body}"
        assert _codes(tmp_path / "t.py", source) == ["MC512"], decorator


def test_a_staticmethod_is_matched_to_its_callers_without_self(tmp_path: Path) -> None:
    source = ("import torch\n\n\nclass Head:\n"
              "    @staticmethod\n"
              "    def _fill(pad, logits):\n"
              "        return logits.masked_fill(pad, -1e9)\n\n"
              "    def forward(self, x, pad):\n"
              "        return self._fill(pad.float(), x)\n")
    # The float32 argument is `pad`, not `logits`: the finding stays.
    assert _codes(tmp_path / "head.py", source) == ["MC501"]


# mmdet mmdet/models/layers/transformer/utils.py:613 (and torch's own MHA): a uint8 mask is made
# bool in a one-armed `if`, then a dtype guard sends bool masks to masked_fill_ and the rest to +=.
DTYPE_GUARD = '''import torch


def attend(q, k, attn_mask, key_padding_mask):
    if attn_mask.dtype == torch.uint8:
        attn_mask = attn_mask.to(torch.bool)
    weights = torch.bmm(q, k.transpose(1, 2))
    if attn_mask.dtype {op} torch.bool:
        {first}
    else:
        {second}
    return weights + attn_mask
'''
FILL = "weights.masked_fill_(attn_mask, float('-inf'))"
ADD = "weights += attn_mask"


def _mc509_lines(tmp_path: Path, source: str) -> list[int]:
    path = tmp_path / "attention.py"
    path.write_text(source)
    report = lint_file(str(path), frozenset({"MC509"}))
    assert report.error is None, report.error
    return [f.line for f in report.findings]


def test_the_branch_a_dtype_guard_rules_out_bool_is_silent(tmp_path: Path) -> None:
    guarded = DTYPE_GUARD.format(op="==", first=FILL, second=ADD)
    # the += in the else branch is not a bool mask; after the if, the one-armed `.to(torch.bool)`
    # still reads as bool (line 12)
    assert _mc509_lines(tmp_path, guarded) == [12]
    flipped = DTYPE_GUARD.format(op="!=", first=ADD, second=FILL)
    assert _mc509_lines(tmp_path, flipped) == [12]


def test_the_bool_branch_of_a_dtype_guard_keeps_its_finding(tmp_path: Path) -> None:
    # adding in the branch where the mask IS bool is the bug
    wrong = DTYPE_GUARD.format(op="==", first=ADD, second=FILL)
    assert _mc509_lines(tmp_path, wrong) == [9, 12]


def test_a_float_guard_narrows_its_body(tmp_path: Path) -> None:
    source = DTYPE_GUARD.replace("if attn_mask.dtype {op} torch.bool:",
                                 "if attn_mask.is_floating_point():")
    assert _mc509_lines(tmp_path, source.format(first=ADD, second=FILL)) == [12]


# gluonts src/gluonts/mx/activation.py:152: MXNet code, where `x > 0` is a float 0/1 array.
MXNET = '''import mxnet as mx

from gluonts.mx import Tensor


def deriv_elu(F, x: Tensor, alpha: float = 1.0):
    m = x > 0
    return m + (1 - m) * (F.LeakyReLU(x, act_type="elu", slope=alpha) + alpha)
'''


def test_a_module_of_another_framework_is_not_torch_code(tmp_path: Path) -> None:
    assert _codes(tmp_path / "activation.py", MXNET) == []
    with_torch = MXNET.replace("import mxnet as mx\n", "import mxnet as mx\nimport torch\n")
    assert _codes(tmp_path / "activation.py", with_torch) == ["MC512"]


# vllm .../cutedsl/moe/tail_runtime.py:103: a 16-bit buffer's bits filled with INT32_MIN (there a
# bfloat16 one; float16 here, where the fill without the view would overflow).
BIT_VIEW = '''import torch


def make(cap, device):
    reduced = torch.empty((3, cap, 3584), dtype=torch.{half}, device=device)
    reduced.view({dtype}).fill_(-0x80000000)
    return reduced
'''


def test_a_fill_through_a_dtype_view_has_the_view_dtype(tmp_path: Path) -> None:
    path = tmp_path / "tail_runtime.py"
    assert _codes(path, BIT_VIEW.format(half="float16", dtype="torch.int32")) == []
    assert _codes(path, BIT_VIEW.format(half="float16", dtype="3, -1")) == ["MC501"]


def test_bfloat16_has_the_range_of_float32(tmp_path: Path) -> None:
    # -2**31 and -1e9 are finite in bfloat16 (checked on torch 2.13); 1e39 is not
    path = tmp_path / "tail_runtime.py"
    assert _codes(path, BIT_VIEW.format(half="bfloat16", dtype="3, -1")) == []
    source = ("import torch\n\ndef f(m, y):\n    x = y.bfloat16()\n"
              "    return x.masked_fill(m, {v})\n")
    assert _codes(path, source.format(v="-1e9")) == []
    assert _codes(path, source.format(v="-1e39")) == ["MC501"]
    full = "import torch\n\ndef f(n):\n    return torch.full((n, n), -1e9, dtype=torch.{d})\n"
    assert _codes(path, full.format(d="bfloat16")) == []
    assert _codes(path, full.format(d="float16")) == ["MC501"]


def test_an_int_literal_past_float_range_is_linted(tmp_path: Path) -> None:
    # sympy holds 400-digit int constants: float() of them raised OverflowError and stopped
    # the whole run
    huge = "x = 1" + "0" * 400 + " + 1\n"
    source = huge + REFERENCE
    assert _codes(tmp_path / "indexer.py", source) == ["MC501"]


COUNTING = '''import torch


def step(x, ids, labels, logits, y, num_sims, sample_weights, attn_lengths, pad_id):
    num_sims = num_sims + (len(x) > 0)
    pad = (x.size(-1) > 4) - 1
    wide = (x.shape[-1] > 8) - 1
    sample_weights = sample_weights + labels.eq(1)
    n_correct_logits = logits.sum() + (logits.argmax(-1) == y)
    attn_lengths = attn_lengths + (ids != pad_id)
    return num_sims, pad, wide, sample_weights, n_correct_logits, attn_lengths
'''


def test_python_bools_and_counts_are_not_masks(tmp_path: Path) -> None:
    path = tmp_path / "counts.py"
    path.write_text(COUNTING)
    report = lint_file(str(path), frozenset({"MC508", "MC509", "MC512"}))
    assert report.error is None and report.findings == [], report.findings
    scores = COUNTING.replace("attn_lengths = attn_lengths", "attn_scores = attn_scores")
    path.write_text(scores.replace("attn_lengths", "attn_scores"))
    report = lint_file(str(path), frozenset({"MC509"}))
    assert [f.line for f in report.findings] == [10]


def test_numpy_bool_arithmetic_is_numpy_s(tmp_path: Path) -> None:
    source = "import numpy as np\n\ndef f(a):\n    keep = np.asarray(a) > 0\n    return keep - 1\n"
    assert _codes(tmp_path / "np_only.py", source) == []
    assert _codes(tmp_path / "np_only.py", "import torch\n" + source) == ["MC512"]


CACHE_BRANCHES = '''import torch
import torch.nn.functional as F


def attend(q, k, v, past_k, use_cache):
    if use_cache:
        k = torch.cat([past_k, k], dim=2)
    if use_cache:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y
'''


def test_a_causal_call_on_the_cached_branch_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "attend.py"
    path.write_text(CACHE_BRANCHES)
    report = lint_file(str(path), frozenset({"MC510"}))
    # line 9 runs with the concatenated cache; line 11 only without it
    assert [f.line for f in report.findings] == [9]


BF16_CASES = '''import torch
import torch.nn.functional as F


def full_min(n):
    return torch.full((n, n), torch.finfo(torch.float32).min, dtype=torch.{d})


def tri_mask(x, n):
    mha = torch.nn.MultiheadAttention(8, 2)
    return mha(x, x, x, attn_mask=torch.ones(n, n, dtype=torch.{d}).tril())


def length_mask(q, k, v, ids, pad_id):
    q = q.{d}()
    keep = (ids != pad_id)[:, None, None, :].to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
'''


def test_bfloat16_is_a_half_dtype_for_the_rules_that_are_not_about_range(
        tmp_path: Path) -> None:
    path = tmp_path / "bf16.py"
    for dtype in ("float16", "bfloat16"):
        path.write_text(BF16_CASES.format(d=dtype).replace("q.float16()", "q.half()"))
        report = lint_file(str(path), frozenset({"MC508", "MC517"}))
        assert [(f.line, f.code) for f in report.findings] == [
            (6, "MC517"), (11, "MC508"), (16, "MC508")], dtype


def test_a_similarity_matrix_may_drop_its_diagonal(tmp_path: Path) -> None:
    source = ("import torch\n\ndef closest_pairs(emb):\n    {m} = emb @ emb.T\n"
              "    idx = torch.triu_indices({m}.size(0), {m}.size(0))\n"
              "    {m}[idx[0], idx[1]] = float('-inf')\n    return {m}.flatten().topk(5)\n")
    path = tmp_path / "pairs.py"
    path.write_text(source.format(m="sim"))
    assert lint_file(str(path), frozenset({"MC503"})).findings == []
    path.write_text(source.format(m="dot"))
    assert [f.code for f in lint_file(str(path), frozenset({"MC503"})).findings] == ["MC503"]


# RecBole model/abstract_recommender.py:452 (max pooling of a token-sequence field's embeddings).
RECBOLE_POOLING = '''import torch


def embed_token_seq_fields(token_seq_field, embedding_table):
    mask = token_seq_field != 0
    mask = {cast}
    token_seq_embedding = embedding_table(token_seq_field)
    mask = mask.unsqueeze(2).expand_as(token_seq_embedding)
    masked = token_seq_embedding - (1 - mask) * 1e9
    return torch.max(masked, dim=1, keepdim=True)
'''


def test_an_additive_mask_made_float32_cannot_overflow_float16(tmp_path: Path) -> None:
    # `(1 - mask) * 1e9` is float32 when the mask is, and any float tensor minus it is float32.
    source = RECBOLE_POOLING.format(cast="mask.float()")
    assert _codes(tmp_path / "abstract_recommender.py", source) == []


def test_the_same_mask_in_half_is_reported(tmp_path: Path) -> None:
    # float16 turns the difference into -inf without raising: an empty sequence max-pools to
    # -inf (where float32 gave a finite -1e9)
    source = RECBOLE_POOLING.format(cast="mask.half()")
    assert _codes(tmp_path / "abstract_recommender.py", source) == ["MC501"]


def test_the_same_pooling_of_unknown_dtype_is_silent_but_not_attention(tmp_path: Path) -> None:
    # A non-raising -inf needs float16 shown in the file; handed to softmax (attention) the same
    # difference is reported there, and only there.
    for cast in ("mask.to(token_seq_embedding.dtype)", "mask.float().to(token_seq_embedding)"):
        source = RECBOLE_POOLING.format(cast=cast)
        assert _codes(tmp_path / "abstract_recommender.py", source) == [], cast
        softmaxed = source.replace("torch.max(masked, dim=1, keepdim=True)",
                                   "masked.softmax(dim=1)")
        assert _codes(tmp_path / "abstract_recommender.py", softmaxed) == [], cast
        assert _codes(tmp_path / "abstract_recommender.py", softmaxed + HALF_NOTE) == [
            "MC501"], cast


# sglang srt/layers/attention/aiter_backend.py:1836: the log-sum-exp of an MLA decode kernel.
KERNEL_LSE = '''import torch


def forward_verify(self, q, layer, empty):
    out_a, {name} = self._forward_verify_asm_cprr(q, layer)
    out_a.masked_fill_(empty[:, None, None], 0.0)
    {name}.masked_fill_(empty[:, None], -1e30)
    return out_a, {name}
'''


def test_a_kernels_log_sum_exp_is_float32(tmp_path: Path) -> None:
    for name in ("lse_a", "softmax_lse", "lse", "logsumexp"):
        source = KERNEL_LSE.format(name=name)
        assert _codes(tmp_path / "aiter_backend.py", source) == [], name


def test_other_kernel_outputs_and_a_half_lse_are_still_reported(tmp_path: Path) -> None:
    # Only a name that is a log-sum-exp (not `else_`, `pulse`), and only while the file does
    # not show its dtype: torch.logsumexp keeps its input's float16.
    for name in ("scores_a", "pulse", "attn_weights"):
        source = KERNEL_LSE.format(name=name)
        assert _codes(tmp_path / "aiter_backend.py", source) == ["MC501"], name
    half = ("import torch\n\n\ndef merge(scores, empty):\n"
            "    lse = torch.logsumexp(scores.half(), dim=-1)\n"
            "    return lse.masked_fill(empty, -1e30)\n")
    assert _codes(tmp_path / "merge.py", half) == ["MC501"]


# sentence-transformers (main) sentence_transformers/models/Pooling.py:163: max pooling.
MAX_POOLING = '''import torch


def pool(token_embeddings, attention_mask):
    input_mask_expanded = (
        attention_mask.unsqueeze(-1).expand(token_embeddings.size()).to(token_embeddings.dtype)
    )
    {target}[input_mask_expanded == 0] = -1e9
    return torch.max({target}, 1)[0]
'''


def test_an_indexed_write_into_embeddings_is_not_a_score_mask(tmp_path: Path) -> None:
    # In float16 the write gives -inf without raising (torch 2.13); a max over tokens is right.
    source = MAX_POOLING.format(target="token_embeddings")
    assert _codes(tmp_path / "Pooling.py", source) == []


def test_an_indexed_write_into_scores_is_reported(tmp_path: Path) -> None:
    source = MAX_POOLING.format(target="attn_scores")
    assert _codes(tmp_path / "Pooling.py", source + HALF_NOTE) == ["MC501"]
    assert _codes(tmp_path / "Pooling.py", source) == []  # float16 nowhere in the file


HALF_NOTE = "\n# This model runs in float16 (model.half()): what makes the -inf below reachable.\n"


# InternVL internvl_chat/internvl/patch/llama_flash_attn_monkey_patch.py:168 (fresh4): the
# patched forward asserts the cache off before the (dead) concatenation.
ASSERTED_OFF = '''import torch
import torch.nn.functional as F


def forward_2(self, hidden_states, past_key_value=None, use_cache=False):
    bsz, q_len, _ = hidden_states.size()
    query_states = self.q_proj(hidden_states).view(bsz, q_len, 8, 64).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(bsz, q_len, 8, 64).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(bsz, q_len, 8, 64).transpose(1, 2)
{asserts}
    if {test}:
        key_states = torch.cat([past_key_value[0], key_states], dim=2)
        value_states = torch.cat([past_key_value[1], value_states], dim=2)

    past_key_value = (key_states, value_states) if use_cache else None
    return F.scaled_dot_product_attention(
        query_states, key_states, value_states, dropout_p=0.0, is_causal=True
    )
'''


def test_a_cache_asserted_off_before_the_concatenation_is_not_reported(tmp_path: Path) -> None:
    for asserts, test in (
            ("    assert not use_cache\n    assert past_key_value is None",
             "past_key_value is not None"),
            ("    assert past_key_value is None and not use_cache", "past_key_value is not None"),
            ("    assert not use_cache", "use_cache and past_key_value is not None")):
        source = ASSERTED_OFF.format(asserts=asserts, test=test)
        assert _codes(tmp_path / "llama_flash_attn_monkey_patch.py", source) == [], asserts


def test_a_cache_not_asserted_off_is_still_reported(tmp_path: Path) -> None:
    # Another name asserted, an `or` in the branch test, or no assert: the cat can run.
    for asserts, test in (
            ("    assert not output_attentions", "past_key_value is not None"),
            ("    assert not use_cache", "use_cache or past_key_value is not None"),
            ("    pass", "past_key_value is not None")):
        source = ASSERTED_OFF.format(asserts=asserts, test=test)
        assert _codes(tmp_path / "llama_flash_attn_monkey_patch.py", source) == ["MC510"], (
            asserts, test)
    # an assert after the call says nothing of the call
    late = ASSERTED_OFF.format(asserts="    pass", test="past_key_value is not None").replace(
        "    return F.", "    out = F.") + "    assert past_key_value is None\n    return out\n"
    assert _codes(tmp_path / "llama_flash_attn_monkey_patch.py", late) == ["MC510"]


# InternVL internvl_chat/eval/domain_specific/mme_rw/evaluate.py:160 (fresh4): two fields of a
# JSON record compared, a Python bool.
RECORD_FIELDS = '''import torch


def evaluate(outputs):
    results = {{}}
    for data_item in outputs:
        cnt = {compare}
        category = data_item['category']
        if category not in results:
            results[category] = {{'true': cnt, 'false': 1 - cnt}}
        else:
            results[category]['true'] += cnt
            results[category]['false'] += 1 - cnt
    return results
'''


def test_a_comparison_of_record_fields_is_a_python_bool(tmp_path: Path) -> None:
    for compare in ("data_item['answer'] == data_item['gt_answers']",
                    "data_item['answer'] == 'A'"):
        source = RECORD_FIELDS.format(compare=compare)
        assert _codes(tmp_path / "evaluate.py", source) == [], compare


def test_a_comparison_of_tensors_from_a_batch_dict_is_still_a_bool_tensor(
        tmp_path: Path) -> None:
    # The field's name says tensor (ids, mask), or the subscript is a tensor slice.
    for compare in ("data_item['input_ids'] == pad_token_id",
                    "data_item['attention_mask'] == 0",
                    "data_item[:, 0] == 0"):
        source = RECORD_FIELDS.format(compare=compare).replace(
            "def evaluate(outputs):", "def evaluate(outputs, pad_token_id=0):")
        assert _codes(tmp_path / "evaluate.py", source) == ["MC512", "MC512"], compare
