"""A tool-calling agent loop on a static-cache decoder (gpt-fast layout).

The transcript is rendered with a small chat template; when the assistant
emits <tool>{json}</tool> the runtime executes the tool and appends its
result as a tool message.  Old tool results are cleared from the context once
a later turn has used them (context editing): their positions stay in the
static cache but are hidden from attention, so nothing has to be prefilled
again.  `reset` starts a new conversation on the same model and cache.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md section 2.3.
"""
import ast
import json
import operator
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

TEMPLATE = {"system": "<|system|>{}\n", "user": "<|user|>{}\n", "assistant": "<|assistant|>{}\n", "tool": "<|tool|>{}\n"}


class KVCache(nn.Module):
    def __init__(self, max_batch_size, max_seq_length, n_heads, head_dim):
        super().__init__()
        shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def update(self, input_pos, k_val, v_val):
        self.k_cache[:, :, input_pos] = k_val
        self.v_cache[:, :, input_pos] = v_val
        return self.k_cache, self.v_cache


class Attention(nn.Module):
    def __init__(self, dim, n_head):
        super().__init__()
        self.n_head, self.head_dim = n_head, dim // n_head
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.kv_cache = None

    def forward(self, x, mask, input_pos):
        bsz, seqlen, dim = x.shape
        q, k, v = self.wqkv(x).split(dim, dim=-1)
        q, k, v = (t.view(bsz, seqlen, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        k, v = self.kv_cache.update(input_pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).contiguous().view(bsz, seqlen, dim))


class Transformer(nn.Module):
    def __init__(self, vocab_size=259, dim=64, n_head=4, n_layer=2, block_size=512):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.pos_embeddings = nn.Embedding(block_size, dim)
        self.attention = nn.ModuleList(Attention(dim, n_head) for _ in range(n_layer))
        self.feed_forward = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim)) for _ in range(n_layer))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2 * n_layer))
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        self.n_head, self.dim = n_head, dim

    def setup_caches(self, max_batch_size, max_seq_length):
        for attn in self.attention:
            attn.kv_cache = KVCache(max_batch_size, max_seq_length, self.n_head, self.dim // self.n_head)
        bias = torch.triu(torch.full((max_seq_length, max_seq_length), float("-inf")), diagonal=1)
        self.register_buffer("attn_bias", bias, persistent=False)

    def forward(self, idx, input_pos, hidden=None):
        bias = self.attn_bias
        if hidden is not None:
            bias = self.attn_bias.masked_fill_(hidden, float("-inf"))  # expect: MC524 buffer
        mask = bias[None, None, input_pos]
        x = self.tok_embeddings(idx) + self.pos_embeddings(input_pos)
        for i, (attn, ff) in enumerate(zip(self.attention, self.feed_forward)):
            x = x + attn(self.norms[2 * i](x), mask, input_pos)
            x = x + ff(self.norms[2 * i + 1](x))
        return self.output(self.norm(x))


OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calc(expr):
    def ev(node):
        if isinstance(node, ast.BinOp):
            return OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Constant):
            return node.value
        raise ValueError(expr)
    return ev(ast.parse(expr, mode="eval").body)


TOOLS = {"calc": lambda args: str(calc(args["expr"]))}
SYSTEM = "You are a careful assistant. Call a tool with <tool>{json}</tool>. Tools: " + json.dumps(
    [{"name": "calc", "description": "evaluate an arithmetic expression", "arguments": {"expr": "string"}}]
)


def tool_call(expr):
    return "<tool>" + json.dumps({"name": "calc", "arguments": {"expr": expr}}) + "</tool>"


class Agent:
    eos = 256

    def __init__(self, model, max_seq_length=512):
        self.model, self.max_seq_length = model, max_seq_length
        model.setup_caches(1, max_seq_length)
        self.reset()

    def reset(self):
        self.pos, self.spans = 0, []
        self.hidden = torch.zeros(self.max_seq_length, dtype=torch.bool)

    @torch.no_grad()
    def feed_ids(self, ids):
        input_pos = torch.arange(self.pos, self.pos + len(ids))
        logits = self.model(torch.tensor([ids]), input_pos, self.hidden)
        self.pos += len(ids)
        return logits[:, -1]

    def feed_text(self, text):
        return self.feed_ids(list(text.encode()))

    def feed(self, text, role):
        start = self.pos
        logits = self.feed_text(TEMPLATE[role].format(text))
        self.spans.append((role, start, self.pos))
        return logits

    def clear_tool_results(self, keep_last=1):
        tool_spans = [s for s in self.spans if s[0] == "tool"]
        for _, start, end in tool_spans[: max(len(tool_spans) - keep_last, 0)]:
            self.hidden[start:end] = True

    def respond(self, max_new_tokens=24):
        start, out = self.pos, []
        logits = first = self.feed_text("<|assistant|>")
        for _ in range(max_new_tokens):
            tok = int(logits.argmax(-1))
            if tok == self.eos or tok > 255:
                break
            out.append(tok)
            logits = self.feed_ids([tok])
        self.feed_text("\n")
        self.spans.append(("assistant", start, self.pos))
        return bytes(out).decode(errors="replace"), first

    def replay(self, messages):
        for role, text in messages:
            self.feed(text, role)
            if role == "assistant":
                self.run_tools(text)

    def run_tools(self, message):
        for call in re.findall(r"<tool>(.*?)</tool>", message):
            spec = json.loads(call)
            self.feed(TOOLS[spec["name"]](spec["arguments"]), "tool")


if __name__ == "__main__":
    torch.manual_seed(0)
    agent = Agent(Transformer().eval())
    agent.replay([("system", SYSTEM), ("user", "What is 12*7, then plus 5?"),
                  ("assistant", tool_call("12*7")), ("assistant", tool_call("84+5"))])
    agent.clear_tool_results()
    reply, _ = agent.respond()
    print("conversation 1:", repr(reply), "hidden positions:", int(agent.hidden.sum()))
    agent.reset()
    agent.replay([("system", SYSTEM), ("user", "I run 3 laps of 400 m every morning and 5 laps of 400 m every "
                                               "evening. How many metres is that in a week of seven days?")])
    reply, first = agent.respond()
    print("conversation 2:", repr(reply), "position:", agent.pos)
