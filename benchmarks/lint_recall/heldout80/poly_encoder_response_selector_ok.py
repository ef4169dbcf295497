"""Poly-encoder response selection for a retrieval-based dialogue agent (ParlAI layout).

The dialogue history is encoded token by token; `n_codes` learned codes attend over the
context outputs and give `n_codes` global context vectors. Each candidate response is
encoded to a single vector, attends over those context vectors, and the score is the dot
product of the attended context with the candidate. Training scores every context against
the gold responses of the whole batch (batch negatives); at inference a fixed candidate
set is encoded once and cached.

Source: conventions.md §1 (direction cheat-sheet; nn.MultiheadAttention and HF attention_mask rows); seed self_attention_mask_guide.txt §2 and §7 Q1; pytorch/pytorch#40932 (§3 item 2).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

opt = {
    "embedding_size": 64,
    "n_heads": 4,
    "n_layers": 2,
    "polyencoder_codes": 4,
    "text_truncate": 24,
    "label_truncate": 12,
    "null_idx": 0,
    "vocab_size": 1000,
}


def txt2vec(text, truncate):
    vec = [4 + (sum(ord(c) * (i + 11) for i, c in enumerate(w)) % (opt["vocab_size"] - 4)) for w in text.lower().split()]
    return vec[-truncate:]


def batchify(texts, truncate):
    vecs = [txt2vec(t, truncate) for t in texts]
    width = max(len(v) for v in vecs)
    return torch.tensor([v + [opt["null_idx"]] * (width - len(v)) for v in vecs])


class TransformerEncoder(nn.Module):
    def __init__(self, reduction_type):
        super().__init__()
        d = opt["embedding_size"]
        self.embeddings = nn.Embedding(opt["vocab_size"], d, padding_idx=opt["null_idx"])
        self.position_embeddings = nn.Embedding(64, d)
        layer = nn.TransformerEncoderLayer(d, opt["n_heads"], 4 * d, dropout=0.1, batch_first=True, activation="gelu")
        self.layers = nn.TransformerEncoder(layer, opt["n_layers"], enable_nested_tensor=False)
        self.reduction_type = reduction_type

    def forward(self, input_ids):
        attention_mask = input_ids != opt["null_idx"]
        x = self.embeddings(input_ids) + self.position_embeddings.weight[: input_ids.size(1)]
        x = self.layers(x, src_key_padding_mask=~attention_mask)
        if self.reduction_type == "first":
            return x[:, 0, :], attention_mask
        return x, attention_mask


class PolyEncoderModule(nn.Module):
    def __init__(self):
        super().__init__()
        d = opt["embedding_size"]
        self.encoder_ctxt = TransformerEncoder(reduction_type="none")
        self.encoder_cand = TransformerEncoder(reduction_type="first")
        self.codes = nn.Parameter(torch.empty(opt["polyencoder_codes"], d))
        nn.init.uniform_(self.codes)
        self.code_attention = nn.MultiheadAttention(d, opt["n_heads"], batch_first=True)

    def encode(self, ctxt_tokens=None, cand_tokens=None):
        ctxt_rep = cand_rep = None
        if ctxt_tokens is not None:
            ctxt_out, attention_mask = self.encoder_ctxt(ctxt_tokens)
            codes = self.codes.unsqueeze(0).expand(ctxt_out.size(0), -1, -1)
            ctxt_rep, _ = self.code_attention(codes, ctxt_out, ctxt_out, key_padding_mask=~attention_mask)
        if cand_tokens is not None:
            cand_rep, _ = self.encoder_cand(cand_tokens)
        return ctxt_rep, cand_rep

    def score(self, ctxt_rep, cand_embed):
        if cand_embed.dim() == 2:
            cand_embed = cand_embed.unsqueeze(0).expand(ctxt_rep.size(0), -1, -1)
        attn = torch.softmax(cand_embed @ ctxt_rep.transpose(1, 2), dim=-1)
        ctxt_final = attn @ ctxt_rep
        return (ctxt_final * cand_embed).sum(-1)

    def forward(self, ctxt_tokens=None, cand_tokens=None, ctxt_rep=None, cand_rep=None):
        if ctxt_rep is not None and cand_rep is not None:
            return self.score(ctxt_rep, cand_rep)
        return self.encode(ctxt_tokens, cand_tokens)


class PolyencoderAgent:
    def __init__(self):
        self.model = PolyEncoderModule()
        self.optimizer = torch.optim.Adamax(self.model.parameters(), lr=5e-4)
        self.fixed_candidates = None
        self.fixed_candidate_vecs = None

    def train_step(self, contexts, labels):
        self.model.train()
        ctxt_rep, cand_rep = self.model(ctxt_tokens=batchify(contexts, opt["text_truncate"]),
                                        cand_tokens=batchify(labels, opt["label_truncate"]))
        scores = self.model(ctxt_rep=ctxt_rep, cand_rep=cand_rep)
        loss = F.cross_entropy(scores, torch.arange(len(contexts)))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item(), (scores.argmax(-1) == torch.arange(len(contexts))).float().mean().item()

    @torch.no_grad()
    def set_fixed_candidates(self, candidates):
        self.model.eval()
        self.fixed_candidates = candidates
        _, self.fixed_candidate_vecs = self.model(cand_tokens=batchify(candidates, opt["label_truncate"]))

    @torch.no_grad()
    def act(self, history, topk=2):
        self.model.eval()
        ctxt_rep, _ = self.model(ctxt_tokens=batchify(["\n".join(history)], opt["text_truncate"]))
        scores = self.model(ctxt_rep=ctxt_rep, cand_rep=self.fixed_candidate_vecs)[0]
        top = scores.topk(topk)
        return [(self.fixed_candidates[i], round(s, 3)) for s, i in zip(top.values.tolist(), top.indices.tolist())]


if __name__ == "__main__":
    torch.manual_seed(0)
    dialogues = [
        (["hi there", "hello ! how are you today ?"], "i am good thanks , just got back from a run"),
        (["do you have any pets ?"], "yes , two cats and a very lazy dog"),
        (["what did you cook for dinner last night after work ?", "something quick ?"], "just pasta with tomato sauce"),
        (["any plans for the weekend ?"], "hiking in the mountains if the weather holds"),
    ]
    agent = PolyencoderAgent()
    contexts = ["\n".join(h) for h, _ in dialogues]
    labels = [r for _, r in dialogues]
    for epoch in range(3):
        loss, acc = agent.train_step(contexts, labels)
        print(f"epoch {epoch} loss {loss:.4f} acc {acc:.2f}")
    agent.set_fixed_candidates(labels)
    print(agent.act(["do you have any pets ?"]))
