"""DrRepair-style repair of C programs from compiler feedback (DeepFix / SPoC data).

The program is read line by line together with the compiler's error message. Symbol
occurrences shared by the code and the message are joined in a program-feedback graph
and mixed by graph attention; line vectors then attend to the other lines and to the
message, a pointer picks the erroneous line and a token head proposes its edit.

Source: seed masked_fill_inplace.txt (梯度计算风险); conventions.md §2.3
"""
import argparse
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, UNK = 0, 1
VOCAB_SIZE = 300
MAX_TOKENS_PER_LINE = 10


def lex(line):
    return re.findall(r"[A-Za-z_]\w*|\d+|\S", line)[:MAX_TOKENS_PER_LINE]


def to_id(tok):
    return 2 + sum(ord(c) * (i + 1) for i, c in enumerate(tok)) % (VOCAB_SIZE - 2)


def make_batch(examples):
    n_lines = max(len(ex["code"]) for ex in examples)
    n_msg = max(len(lex(ex["error"])) for ex in examples)
    code = torch.full((len(examples), n_lines, MAX_TOKENS_PER_LINE), PAD, dtype=torch.long)
    msg = torch.full((len(examples), n_msg), PAD, dtype=torch.long)
    err_line = torch.tensor([ex["err_line"] for ex in examples])
    fix = torch.full((len(examples), MAX_TOKENS_PER_LINE), PAD, dtype=torch.long)
    for b, ex in enumerate(examples):
        for i, line in enumerate(ex["code"]):
            toks = [to_id(t) for t in lex(line)]
            code[b, i, :len(toks)] = torch.tensor(toks)
        toks = [to_id(t) for t in lex(ex["error"])]
        msg[b, :len(toks)] = torch.tensor(toks)
        toks = [to_id(t) for t in lex(ex["fix"])]
        fix[b, :len(toks)] = torch.tensor(toks)
    return {"code": code, "msg": msg, "err_line": err_line, "fix": fix}


class GraphAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 3 * dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, nodes, adj):
        q, k, v = self.proj(nodes).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~adj, torch.finfo(scores.dtype).min)
        return self.norm(nodes + scores.softmax(-1) @ v)


class LineAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, lines, line_keep, msg, msg_keep):
        keys = torch.cat([lines, msg], dim=1)
        key_keep = torch.cat([line_keep, msg_keep], dim=1)
        scores = self.q(lines) @ self.k(keys).transpose(1, 2) / math.sqrt(lines.size(-1))
        scores = scores.masked_fill(~key_keep[:, None, :], torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        attn.masked_fill_(~line_keep[:, :, None], 0.0)  # expect: MC505 inplace
        return self.norm(lines + attn @ self.v(keys))


class DrRepair(nn.Module):
    def __init__(self, dim=48):
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, dim, padding_idx=PAD)
        self.token_lstm = nn.LSTM(dim, dim // 2, batch_first=True, bidirectional=True)
        self.msg_lstm = nn.LSTM(dim, dim // 2, batch_first=True, bidirectional=True)
        self.graph = GraphAttention(dim)
        self.line_attn = nn.ModuleList(LineAttention(dim) for _ in range(2))
        self.pointer = nn.Linear(2 * dim, 1)
        self.edit_head = nn.Linear(2 * dim, VOCAB_SIZE)

    def forward(self, code, msg):
        b, n, t = code.shape
        tok_keep, msg_keep = code != PAD, msg != PAD
        line_keep = tok_keep.any(-1)
        tokens, _ = self.token_lstm(self.embed(code.view(b * n, t)))
        message, _ = self.msg_lstm(self.embed(msg))
        ids = torch.cat([code.view(b, n * t), msg], dim=1)
        node_keep = torch.cat([tok_keep.view(b, n * t), msg_keep], dim=1)
        adj = (ids[:, :, None] == ids[:, None, :]) & node_keep[:, None, :]
        adj = adj | torch.eye(ids.size(1), dtype=torch.bool, device=ids.device)
        nodes = self.graph(torch.cat([tokens.reshape(b, n * t, -1), message], dim=1), adj)
        tokens, message = nodes[:, :n * t].view(b, n, t, -1), nodes[:, n * t:]
        weights = tok_keep.unsqueeze(-1).float()
        lines = (tokens * weights).sum(2) / weights.sum(2).clamp(min=1.0)
        for layer in self.line_attn:
            lines = layer(lines, line_keep, message, msg_keep)
        summary = (message * msg_keep.unsqueeze(-1)).sum(1) / msg_keep.sum(1, keepdim=True).clamp(min=1)
        line_logits = self.pointer(torch.cat([lines, summary[:, None].expand_as(lines)], -1)).squeeze(-1)
        line_logits = line_logits.masked_fill(~line_keep, torch.finfo(line_logits.dtype).min)
        return line_logits, tokens, lines

    def edit_logits(self, tokens, lines, line_index):
        rows = torch.arange(tokens.size(0))
        chosen = tokens[rows, line_index]
        return self.edit_head(torch.cat([chosen, lines[rows, line_index, None].expand_as(chosen)], -1))


def repair_loss(model, batch):
    line_logits, tokens, lines = model(batch["code"], batch["msg"])
    edit = model.edit_logits(tokens, lines, batch["err_line"])
    loc_loss = F.cross_entropy(line_logits, batch["err_line"])
    edit_loss = F.cross_entropy(edit.flatten(0, 1), batch["fix"].flatten(), ignore_index=PAD)
    return loc_loss + edit_loss


@torch.no_grad()
def localize(model, batch):
    line_logits, tokens, lines = model(batch["code"], batch["msg"])
    pred = line_logits.argmax(-1)
    return pred, model.edit_logits(tokens, lines, pred).argmax(-1)


EXAMPLES = [
    dict(code=["int main() {", "  int x = 3", "  printf(\"%d\", x);", "  return 0;", "}"],
         error="5:12: error: expected ';' after declaration", err_line=1, fix="  int x = 3;"),
    dict(code=["#include <stdio.h>", "int main() {", "  for (i = 0; i < 3; i++)", "    puts(\"hi\");",
               "  return 0;", "}"],
         error="3:8: error: 'i' undeclared (first use in this function)", err_line=2,
         fix="  for (int i = 0; i < 3; i++)"),
]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-steps", type=int, default=0)
    opts = parser.parse_args()
    torch.manual_seed(0)
    model = DrRepair()
    batch = make_batch(EXAMPLES)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(opts.train_steps):
        loss = repair_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        print("validation loss", round(repair_loss(model, batch).item(), 4))
    pred_line, edit = localize(model, batch)
    print("predicted error lines", pred_line.tolist(), "edit shape", tuple(edit.shape))
