"""Transformer variant of TRANX's grammar-based action decoder for CoNaLa (NL -> Python).

A Python AST is generated as a sequence of ASDL actions: ApplyRule (constructor chosen
for the frontier field), GenToken (a primitive, generated from the vocabulary or copied
from the intent) and Reduce (close a field). Every decoder input carries the previous
action, the frontier field's type and the parent action's state (parent feeding). Rule
scores are restricted to the productions of the frontier type, and GenToken mixes a
vocabulary softmax with a pointer over the intent tokens.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), pytorch/pytorch#29546 (item 9);
conventions.md §1 (direction cheat-sheet)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

RULES = ["Reduce", "expr -> Call(expr func, expr* args)", "expr -> Attribute(expr value, identifier attr)",
         "expr -> Name(identifier id)", "expr -> Str(string s)", "stmt -> Expr(expr value)"]
FIELD_TYPES = {"stmt": 0, "expr": 1, "expr*": 2, "identifier": 3, "string": 4}
RULES_OF_TYPE = {0: [5], 1: [1, 2, 3, 4], 2: [0, 1, 2, 3, 4], 3: [], 4: []}
APPLY, GEN = 0, 1


def valid_rule_mask(frontier_types):
    allowed = torch.zeros(*frontier_types.shape, len(RULES), dtype=torch.bool)
    for type_id, rules in RULES_OF_TYPE.items():
        for r in rules:
            allowed[..., r] |= frontier_types == type_id
    return allowed


class TransformerActionDecoder(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=0)
        self.encoder = nn.LSTM(d, d // 2, batch_first=True, bidirectional=True)
        self.rule_embed = nn.Embedding(len(RULES) + 1, d)
        self.token_embed = nn.Embedding(tgt_vocab, d)
        self.type_embed = nn.Embedding(len(FIELD_TYPES), d)
        self.pos_embed = nn.Embedding(64, d)
        self.self_qkv = nn.Linear(d, 3 * d)
        self.cross_q, self.cross_kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.rule_out = nn.Linear(d, len(RULES))
        self.token_out = nn.Linear(d, tgt_vocab)
        self.copy_q = nn.Linear(d, d)
        self.p_gen = nn.Linear(d, 1)

    def _split(self, x):
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def _causal(self, t, device):
        return torch.tril(torch.ones(t, t, dtype=torch.bool, device=device))

    def forward(self, src, prev_rule, prev_token, frontier_type, parent_t):
        src_keep = src != 0
        memory, _ = self.encoder(self.src_embed(src))
        b, t = prev_rule.shape
        x = self.rule_embed(prev_rule) + self.token_embed(prev_token) + self.type_embed(frontier_type)
        x = x + self.pos_embed(torch.arange(t, device=src.device))
        q, k, v = map(self._split, self.self_qkv(x).chunk(3, dim=-1))
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=self._causal(t, src.device))
        x = self.norm1(x + h.transpose(1, 2).reshape(b, t, -1))
        parent = x.gather(1, parent_t.clamp(min=0)[..., None].expand_as(x)) * (parent_t >= 0)[..., None]
        x = x + parent
        mk, mv = map(self._split, self.cross_kv(memory).chunk(2, dim=-1))
        h = F.scaled_dot_product_attention(self._split(self.cross_q(x)), mk, mv, attn_mask=src_keep[:, None, None, :])
        x = self.norm2(x + h.transpose(1, 2).reshape(b, t, -1))
        x = self.norm3(x + self.ffn(x))
        rule_logits = self.rule_out(x).masked_fill(~valid_rule_mask(frontier_type), torch.finfo(x.dtype).min)
        copy_scores = self.copy_q(x) @ memory.transpose(1, 2)
        copy_probs = copy_scores.masked_fill(~src_keep[:, None, :], float("-inf")).softmax(-1)
        return rule_logits, self.token_out(x).softmax(-1), copy_probs, torch.sigmoid(self.p_gen(x))


def action_loss(model, batch):
    rule_logits, vocab_probs, copy_probs, p_gen = model(batch["src"], batch["prev_rule"], batch["prev_token"],
                                                        batch["frontier_type"], batch["parent_t"])
    is_apply = (batch["kind"] == APPLY) & batch["valid"]
    is_gen = (batch["kind"] == GEN) & batch["valid"]
    rule_nll = F.cross_entropy(rule_logits[is_apply], batch["rule"][is_apply])
    p_vocab = vocab_probs.gather(-1, batch["token"][..., None]).squeeze(-1)
    copy_hit = (batch["src"][:, None, :] == batch["src_token"][..., None]).float()
    p_copy = (copy_probs * copy_hit).sum(-1)
    p_token = p_gen.squeeze(-1) * p_vocab + (1 - p_gen.squeeze(-1)) * p_copy
    return rule_nll - torch.log(p_token[is_gen] + 1e-9).mean(), rule_logits


def make_batch(examples, src_vocab, tgt_vocab):
    t = max(len(ex["actions"]) for ex in examples)
    s = max(len(ex["intent"].split()) for ex in examples)
    keys = ["kind", "rule", "token", "src_token", "prev_rule", "prev_token", "frontier_type", "parent_t"]
    batch = {k: torch.zeros(len(examples), t, dtype=torch.long) for k in keys}
    batch["prev_rule"].fill_(len(RULES))
    batch["valid"] = torch.zeros(len(examples), t, dtype=torch.bool)
    batch["src"] = torch.zeros(len(examples), s, dtype=torch.long)
    for b, ex in enumerate(examples):
        words = ex["intent"].split()
        batch["src"][b, :len(words)] = torch.tensor([src_vocab[w] for w in words])
        for i, (kind, value, field, parent) in enumerate(ex["actions"]):
            batch["kind"][b, i], batch["frontier_type"][b, i] = kind, FIELD_TYPES[field]
            batch["parent_t"][b, i], batch["valid"][b, i] = parent, True
            if kind == APPLY:
                batch["rule"][b, i] = RULES.index(value)
            else:
                batch["token"][b, i], batch["src_token"][b, i] = tgt_vocab[value], src_vocab.get(value, -1)
            if i + 1 < t:
                batch["prev_rule"][b, i + 1] = batch["rule"][b, i] if kind == APPLY else len(RULES)
                batch["prev_token"][b, i + 1] = batch["token"][b, i]
    return batch


CONALA = [
    dict(intent="convert string s to upper case", actions=[
        (APPLY, RULES[5], "stmt", -1), (APPLY, RULES[1], "expr", 0), (APPLY, RULES[2], "expr", 1),
        (APPLY, RULES[3], "expr", 2), (GEN, "s", "identifier", 3), (GEN, "upper", "identifier", 2),
        (APPLY, RULES[0], "expr*", 1)]),
    dict(intent="print the string hello", actions=[
        (APPLY, RULES[5], "stmt", -1), (APPLY, RULES[1], "expr", 0), (APPLY, RULES[3], "expr", 1),
        (GEN, "print", "identifier", 2), (APPLY, RULES[4], "expr*", 1), (GEN, "hello", "string", 4),
        (APPLY, RULES[0], "expr*", 1)]),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    words = sorted({w for ex in CONALA for w in ex["intent"].split()})
    src_vocab = {w: i + 1 for i, w in enumerate(words)}
    tokens = sorted({a[1] for ex in CONALA for a in ex["actions"] if a[0] == GEN})
    tgt_vocab = {w: i + 1 for i, w in enumerate(tokens)}
    model = TransformerActionDecoder(len(src_vocab) + 1, len(tgt_vocab) + 1)
    batch = make_batch(CONALA, src_vocab, tgt_vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(5):
        loss, rule_logits = action_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    is_apply = (batch["kind"] == APPLY) & batch["valid"]
    accuracy = (rule_logits.argmax(-1) == batch["rule"])[is_apply].float().mean()
    print(f"teacher-forced rule accuracy {accuracy.item():.2f}")
