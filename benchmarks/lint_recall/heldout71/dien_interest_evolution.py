"""DIEN: Deep Interest Evolution Network.

An interest extractor GRU runs over the packed behaviour sequence, an auxiliary loss ties each
hidden state to the next clicked item against a sampled negative, and an attention-update GRU
(AUGRU) evolves the interest toward the target ad. Layout after the FuxiCTR / DeepCTR-Torch
ports: behaviour ids padded with 0 on the right, a ``mask`` of real steps, ``pack_padded_sequence``
for the GRUs.

Source: seed masked_fill_inplace.txt (作用; 区别: masked_fill returns a new tensor);
pytorch/pytorch#103749 (conventions.md section 3 item 5).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class AUGRUCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.x2h = nn.Linear(input_size, 3 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 3 * hidden_size, bias=False)

    def forward(self, x, hx, att_score):
        gi = self.x2h(x)
        gh = self.h2h(hx)
        i_r, i_u, i_n = gi.chunk(3, 1)
        h_r, h_u, h_n = gh.chunk(3, 1)
        reset_gate = torch.sigmoid(i_r + h_r)
        update_gate = torch.sigmoid(i_u + h_u)
        new_state = torch.tanh(i_n + reset_gate * h_n)
        update_gate = att_score.view(-1, 1) * update_gate
        return (1.0 - update_gate) * hx + update_gate * new_state


class DynamicGRU(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = AUGRUCell(input_size, hidden_size)
        self.hidden_size = hidden_size

    def forward(self, inputs, att_scores, lengths):
        batch_size, max_len, _ = inputs.shape
        hx = inputs.new_zeros(batch_size, self.hidden_size)
        outputs = []
        for t in range(max_len):
            new_hx = self.cell(inputs[:, t], hx, att_scores[:, t])
            alive = (t < lengths).unsqueeze(-1)
            hx = torch.where(alive, new_hx, hx)
            outputs.append(hx)
        return torch.stack(outputs, dim=1), hx


class InterestEvolutionLayer(nn.Module):
    def __init__(self, emb_dim, hidden_dim, att_hidden=(64, 16)):
        super().__init__()
        self.att_mlp = nn.Sequential(
            nn.Linear(4 * hidden_dim, att_hidden[0]), nn.ReLU(),
            nn.Linear(att_hidden[0], att_hidden[1]), nn.ReLU(),
            nn.Linear(att_hidden[1], 1),
        )
        self.target_proj = nn.Linear(emb_dim, hidden_dim, bias=False)
        self.evolve = DynamicGRU(hidden_dim, hidden_dim)

    def attention_scores(self, target, interests, mask):
        query = self.target_proj(target).unsqueeze(1).expand_as(interests)
        att_in = torch.cat([query, interests, query - interests, query * interests], dim=-1)
        scores = self.att_mlp(att_in).squeeze(-1)
        scores.masked_fill(~mask, float("-inf"))  # expect: MC525 discarded
        return F.softmax(scores, dim=-1)

    def forward(self, target, interests, mask):
        lengths = mask.sum(dim=1)
        att = self.attention_scores(target, interests, mask)
        _, final_interest = self.evolve(interests, att, lengths)
        return final_interest, att


class DIEN(nn.Module):
    def __init__(self, num_items, num_cates, emb_dim=8, gru_hidden=12, dnn_hidden=(64, 32), aux_weight=1.0):
        super().__init__()
        self.item_emb = nn.Embedding(num_items, emb_dim, padding_idx=0)
        self.cate_emb = nn.Embedding(num_cates, emb_dim, padding_idx=0)
        feat_dim = 2 * emb_dim
        self.extractor = nn.GRU(feat_dim, gru_hidden, batch_first=True)
        self.aux_net = nn.Sequential(nn.Linear(gru_hidden + feat_dim, 32), nn.Sigmoid(), nn.Linear(32, 1))
        self.evolution = InterestEvolutionLayer(feat_dim, gru_hidden)
        layers, d = [], feat_dim + gru_hidden + feat_dim
        for h in dnn_hidden:
            layers += [nn.Linear(d, h), nn.PReLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.dnn = nn.Sequential(*layers)
        self.aux_weight = aux_weight

    def embed(self, items, cates):
        return torch.cat([self.item_emb(items), self.cate_emb(cates)], dim=-1)

    def auxiliary_loss(self, interests, click_seq, noclick_seq, mask):
        interests = interests[:, :-1]
        next_mask = mask[:, 1:].float()
        pos = self.aux_net(torch.cat([interests, click_seq[:, 1:]], dim=-1)).squeeze(-1)
        neg = self.aux_net(torch.cat([interests, noclick_seq[:, 1:]], dim=-1)).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="none")
        loss = loss + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="none")
        return (loss * next_mask).sum() / next_mask.sum().clamp(min=1.0)

    def forward(self, batch):
        mask = batch["hist_item"] != 0
        lengths = mask.sum(dim=1)
        target = self.embed(batch["item"], batch["cate"])
        hist = self.embed(batch["hist_item"], batch["hist_cate"])
        packed = pack_padded_sequence(hist, lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_out, _ = self.extractor(packed)
        interests, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=hist.size(1))
        final_interest, att = self.evolution(target, interests, mask)
        hist_sum = (hist * mask.unsqueeze(-1)).sum(dim=1)
        logit = self.dnn(torch.cat([target, final_interest, hist_sum], dim=-1)).squeeze(-1)
        aux = None
        if "neg_item" in batch:
            noclick = self.embed(batch["neg_item"], batch["neg_cate"])
            aux = self.auxiliary_loss(interests, hist, noclick, mask)
        return logit, aux, att


def make_batch(batch_size=5, max_len=6, num_items=40, num_cates=7):
    lengths = torch.randint(2, max_len + 1, (batch_size,))
    lengths[0] = 2
    pos = torch.arange(max_len)[None, :]
    valid = pos < lengths[:, None]
    hist = torch.randint(1, num_items, (batch_size, max_len)) * valid
    neg = torch.randint(1, num_items, (batch_size, max_len)) * valid
    item = torch.randint(1, num_items, (batch_size,))
    cate_of = lambda ids: torch.where(ids > 0, ids % (num_cates - 1) + 1, 0)
    return {
        "item": item, "cate": cate_of(item),
        "hist_item": hist, "hist_cate": cate_of(hist),
        "neg_item": neg, "neg_cate": cate_of(neg),
        "label": torch.randint(0, 2, (batch_size,)).float(),
    }


if __name__ == "__main__":
    torch.manual_seed(7)
    model = DIEN(num_items=40, num_cates=7)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = make_batch()
    for step in range(5):
        logit, aux, att = model(batch)
        loss = F.binary_cross_entropy_with_logits(logit, batch["label"]) + model.aux_weight * aux
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss %.4f  attention on padding %.4f" % (loss.item(), att[~(batch["hist_item"] != 0)].sum().item()))
