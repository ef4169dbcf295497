"""Beam search for a small encoder-decoder summarizer: the padded source is encoded once, the
memory and its padding mask are expanded to batch * beams, finished beams may only extend with
padding, and hypotheses are ranked by length-normalised log-probability.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, conventions.md §1 (direction cheat-sheet)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, PAD, BOS, EOS = 36, 32, 0, 1, 2


class Summarizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(VOCAB, DIM)
        self.enc = nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh())
        self.rnn = nn.GRUCell(2 * DIM, DIM)
        self.query = nn.Linear(DIM, DIM, bias=False)
        self.out = nn.Linear(2 * DIM, VOCAB)

    def encode(self, src):
        memory = self.enc(self.src_emb(src))
        src_keep = (src != PAD).float()
        state = (memory * src_keep[..., None]).sum(1) / src_keep.sum(1, keepdim=True)
        return memory, src_keep, state

    def step(self, token, state, context, memory, src_keep):
        state = self.rnn(torch.cat([self.tgt_emb(token), context], -1), state)
        scores = torch.einsum("bd,bsd->bs", self.query(state), memory) / DIM ** 0.5
        weights = torch.softmax(scores.masked_fill(src_keep == 0, float("-inf")), dim=-1)
        context = torch.einsum("bs,bsd->bd", weights, memory)
        return self.out(torch.cat([state, context], -1)).log_softmax(-1), state, context


@torch.no_grad()
def beam_search(model, src, beams=3, max_len=6, alpha=0.7):
    b = src.shape[0]
    memory, src_keep, state = model.encode(src)
    memory, src_keep, state = (t.repeat_interleave(beams, 0) for t in (memory, src_keep, state))
    context = torch.zeros_like(state)
    tokens = torch.full((b * beams, 1), BOS)
    score = torch.zeros(b, beams)
    score[:, 1:] = float("-inf")
    finished = torch.zeros(b * beams, dtype=torch.bool)
    for _ in range(max_len):
        logp, state, context = model.step(tokens[:, -1], state, context, memory, src_keep)
        logp = logp.masked_fill(finished[:, None], float("-inf"))
        logp[:, PAD] = torch.where(finished, 0.0, float("-inf"))
        total = (score.view(-1, 1) + logp).view(b, beams * VOCAB)
        score, flat = total.topk(beams, dim=-1)
        origin = (flat // VOCAB + torch.arange(b)[:, None] * beams).view(-1)
        nxt = (flat % VOCAB).view(-1, 1)
        tokens = torch.cat([tokens[origin], nxt], dim=1)
        state, context, finished = state[origin], context[origin], finished[origin] | (nxt[:, 0] == EOS)
        if finished.all():
            break
    lengths = (tokens != PAD).sum(1).view(b, beams).float()
    best = (score / lengths ** alpha).argmax(-1)
    return tokens.view(b, beams, -1)[torch.arange(b), best], score


if __name__ == "__main__":
    model = Summarizer().eval()
    docs = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17, 18]]
    src = torch.tensor([d + [PAD] * (7 - len(d)) for d in docs])
    best, scores = beam_search(model, src)
    for d, hyp, sc in zip(docs, best, scores):
        alone, sc_alone = beam_search(model, torch.tensor([d]))
        print("batched", hyp.tolist(), "alone", alone[0].tolist(), f"score gap {(sc - sc_alone[0]).abs().max().item():.3g}")
