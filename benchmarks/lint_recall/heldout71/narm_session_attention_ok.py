"""NARM: Neural Attentive Recommendation Machine for session-based recommendation.

Port in the layout of the common PyTorch NARM repository: sessions come time-major (L x B) and
zero-padded after ``collate_fn`` sorts them by length, a GRU global encoder gives the last
hidden state, a local encoder attends over every hidden state of the session, and a bilinear
decoder scores the whole catalogue. A second ``next_basket`` head reuses the local attention to
score a short list of candidates.

Source: conventions.md section 1 (cheat-sheet: additive masks); seed
self_attention_mask_guide.txt section 7 Q3 (multiplicative vs additive masks).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def collate_fn(data):
    data.sort(key=lambda x: len(x[0]), reverse=True)
    lens = [len(sess) for sess, label in data]
    labels = []
    padded_sesss = torch.zeros(len(data), max(lens)).long()
    for i, (sess, label) in enumerate(data):
        padded_sesss[i, : lens[i]] = torch.LongTensor(sess)
        labels.append(label)
    padded_sesss = padded_sesss.transpose(0, 1)
    return padded_sesss, torch.tensor(labels).long(), lens


class NARM(nn.Module):
    def __init__(self, n_items, hidden_size, embedding_dim, batch_size, n_layers=1):
        super().__init__()
        self.n_items = n_items
        self.hidden_size = hidden_size
        self.batch_size = batch_size
        self.n_layers = n_layers
        self.embedding_dim = embedding_dim
        self.emb = nn.Embedding(self.n_items, self.embedding_dim, padding_idx=0)
        self.emb_dropout = nn.Dropout(0.25)
        self.gru = nn.GRU(self.embedding_dim, self.hidden_size, self.n_layers)
        self.a_1 = nn.Linear(self.hidden_size, self.hidden_size, bias=False)
        self.a_2 = nn.Linear(self.hidden_size, self.hidden_size, bias=False)
        self.v_t = nn.Linear(self.hidden_size, 1, bias=False)
        self.ct_dropout = nn.Dropout(0.5)
        self.b = nn.Linear(self.embedding_dim, 2 * self.hidden_size, bias=False)
        self.device = torch.device("cpu")

    def init_hidden(self, batch_size):
        return torch.zeros((self.n_layers, batch_size, self.hidden_size), requires_grad=True).to(self.device)

    def encode(self, seq, lengths):
        hidden = self.init_hidden(seq.size(1))
        embs = self.emb_dropout(self.emb(seq))
        embs = pack_padded_sequence(embs, lengths)
        gru_out, hidden = self.gru(embs, hidden)
        gru_out, lengths = pad_packed_sequence(gru_out)

        ht = hidden[-1]
        gru_out = gru_out.permute(1, 0, 2)

        c_global = ht
        q1 = self.a_1(gru_out.contiguous().view(-1, self.hidden_size)).view(gru_out.size())
        q2 = self.a_2(ht)

        mask = torch.where(seq.permute(1, 0) > 0, torch.tensor([1.0], device=self.device),
                           torch.tensor([0.0], device=self.device))
        q2_expand = q2.unsqueeze(1).expand_as(q1)
        q2_masked = mask.unsqueeze(2).expand_as(q1) * q2_expand

        scores = self.v_t(torch.sigmoid(q1 + q2_masked).view(-1, self.hidden_size)).view(mask.size())
        alpha = F.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=1)
        c_local = torch.sum(alpha.unsqueeze(2).expand_as(gru_out) * gru_out, 1)

        c_t = torch.cat([c_local, c_global], 1)
        return self.ct_dropout(c_t), alpha

    def forward(self, seq, lengths):
        c_t, _ = self.encode(seq, lengths)
        item_embs = self.emb(torch.arange(self.n_items).to(self.device))
        scores = torch.matmul(c_t, self.b(item_embs).permute(1, 0))
        return scores

    def next_basket(self, seq, lengths, candidates, candidate_mask):
        c_t, _ = self.encode(seq, lengths)
        cand = self.b(self.emb(candidates))
        scores = torch.bmm(cand, c_t.unsqueeze(-1)).squeeze(-1)
        scores = scores.masked_fill(~candidate_mask, float("-inf"))
        return F.log_softmax(scores, dim=-1)


def get_recall(indices, targets):
    targets = targets.view(-1, 1).expand_as(indices)
    hits = (targets == indices).nonzero()
    return len(hits) / targets.size(0) if len(hits) else 0.0


def get_mrr(indices, targets):
    tmp = targets.view(-1, 1)
    targets = tmp.expand_as(indices)
    hits = (targets == indices).nonzero()
    ranks = hits[:, -1] + 1
    rranks = torch.reciprocal(ranks.float())
    return torch.sum(rranks).item() / targets.size(0)


def toy_sessions(n, n_items, max_len, generator=None):
    out = []
    for _ in range(n):
        length = int(torch.randint(1, max_len + 1, (1,), generator=generator))
        sess = torch.randint(1, n_items, (length,), generator=generator).tolist()
        label = int(torch.randint(1, n_items, (1,), generator=generator))
        out.append((sess, label))
    return out


if __name__ == "__main__":
    torch.manual_seed(42)
    n_items = 30
    model = NARM(n_items, hidden_size=16, embedding_dim=12, batch_size=6)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    seq, target, lens = collate_fn(toy_sessions(6, n_items, 5))
    for epoch in range(3):
        model.train()
        outputs = model(seq, lens)
        loss = criterion(outputs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        logits = F.softmax(model(seq, lens), dim=1)
        _, indices = torch.topk(logits, 10, -1)
        cands = torch.randint(1, n_items, (seq.size(1), 4))
        cand_mask = torch.tensor([[True, True, True, False]] * seq.size(1))
        basket = model.next_basket(seq, lens, cands, cand_mask)
    print("loss %.4f recall@10 %.3f mrr@10 %.3f basket %s"
          % (loss.item(), get_recall(indices, target), get_mrr(indices, target), tuple(basket.shape)))
