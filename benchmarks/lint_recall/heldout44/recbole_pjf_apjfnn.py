"""Person-job fit for talent recruitment: APJFNN (Qin et al., SIGIR 2018) in the layout of
RUCAIBox/RecBole-PJF.

A ``config`` dict, an ``interaction`` dict with ``geek_sents`` / ``job_sents`` word ids and their
sentence masks, sentence encoders over words, job-requirement-aware attention from each
requirement to the candidate's experience items, ``calculate_loss`` / ``predict`` as in RecBole,
and GAUC-free AUC evaluation. Synthetic resumes and job postings over a shared skill vocabulary.

Source: conventions.md section 1 (HF 4.x AttentionMaskConverter row); huggingface/transformers#32195
(conventions.md section 3 item 25); seed self_attention_mask_guide.txt (section 7, Q5).
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SKILLS = ["python", "sql", "spark", "java", "react", "aws", "docker", "excel", "tableau", "kotlin",
          "swift", "figma", "pytorch", "golang", "linux", "salesforce"]
FILLER = ["experience", "with", "years", "built", "team", "using", "led", "strong", "knowledge", "of",
          "required", "developed", "projects", "in", "and", "the"]
PAD = 0


def make_vocab():
    return {w: i + 1 for i, w in enumerate(SKILLS + FILLER)}


def make_pair(rng, vocab, max_sent_num=6, max_sent_len=8):
    required = rng.sample(SKILLS, rng.randint(2, 3))
    has = set(rng.sample(SKILLS, rng.randint(1, 5)))
    if rng.random() < 0.5:
        has |= set(required)
    label = int(set(required) <= has)
    job = [[rng.choice(FILLER) for _ in range(rng.randint(2, 5))] + [s] for s in required]
    geek = [[rng.choice(FILLER) for _ in range(rng.randint(2, 6))] + [s] for s in sorted(has)][:max_sent_num]

    def encode(sents):
        ids = torch.full((max_sent_num, max_sent_len), PAD, dtype=torch.long)
        for i, sent in enumerate(sents):
            rng.shuffle(sent)
            row = [vocab[w] for w in sent][:max_sent_len]
            ids[i, : len(row)] = torch.tensor(row)
        return ids

    return encode(geek), encode(job), label


def collate(samples):
    geek = torch.stack([g for g, _, _ in samples])
    job = torch.stack([j for _, j, _ in samples])
    return {
        "geek_sents": geek,
        "job_sents": job,
        "geek_sent_mask": geek.ne(PAD).any(-1),
        "job_sent_mask": job.ne(PAD).any(-1),
        "label": torch.tensor([y for _, _, y in samples], dtype=torch.float),
    }


class SentenceEncoder(nn.Module):
    def __init__(self, vocab_size, embedding_size, hidden_size):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, embedding_size, padding_idx=PAD)
        self.rnn = nn.GRU(embedding_size, hidden_size // 2, batch_first=True, bidirectional=True)
        self.word_att = nn.Linear(hidden_size, 1)

    def forward(self, sents):
        b, n, l = sents.shape
        words = sents.view(b * n, l)
        h, _ = self.rnn(self.emb(words))
        word_logits = self.word_att(torch.tanh(h)).squeeze(-1)
        word_logits = word_logits.masked_fill(words.eq(PAD), torch.finfo(word_logits.dtype).min)
        alpha = word_logits.softmax(-1).unsqueeze(-1)
        return (alpha * h).sum(1).view(b, n, -1)


class AbilityAwareAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.w_q = nn.Linear(hidden_size, hidden_size, bias=False)
        self.w_k = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, job_vec, geek_vec, geek_mask):
        scores = self.w_q(job_vec) @ self.w_k(geek_vec).transpose(1, 2) / math.sqrt(job_vec.size(-1))
        attn_bias = (1.0 - geek_mask[:, None, :]) * torch.finfo(scores.dtype).min  # expect: MC512 keyword
        probs = (scores + attn_bias).softmax(-1)
        return probs @ geek_vec


class APJFNN(nn.Module):
    def __init__(self, config, vocab_size):
        super().__init__()
        h = config["hidden_size"]
        self.geek_encoder = SentenceEncoder(vocab_size, config["embedding_size"], h)
        self.job_encoder = SentenceEncoder(vocab_size, config["embedding_size"], h)
        self.job_encoder.emb = self.geek_encoder.emb
        self.ability_att = AbilityAwareAttention(h)
        self.mlp = nn.Sequential(nn.Linear(3 * h, h), nn.ReLU(), nn.Dropout(config["dropout"]), nn.Linear(h, 1))
        self.loss_fct = nn.BCEWithLogitsLoss()

    @staticmethod
    def masked_mean(x, mask):
        w = mask.unsqueeze(-1).to(x.dtype)
        return (x * w).sum(1) / w.sum(1).clamp(min=1.0)

    def forward(self, interaction):
        geek_vec = self.geek_encoder(interaction["geek_sents"])
        job_vec = self.job_encoder(interaction["job_sents"])
        matched = self.ability_att(job_vec, geek_vec, geek_mask=interaction["geek_sent_mask"])
        job_mask = interaction["job_sent_mask"]
        per_req = torch.cat([job_vec, matched, job_vec * matched], -1)
        return self.mlp(self.masked_mean(per_req, job_mask)).squeeze(-1)

    def calculate_loss(self, interaction):
        return self.loss_fct(self.forward(interaction), interaction["label"])

    def predict(self, interaction):
        return torch.sigmoid(self.forward(interaction))


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return (pos[:, None] > neg[None, :]).float().mean().item()


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab = make_vocab()
    config = {"embedding_size": 32, "hidden_size": 64, "dropout": 0.1, "learning_rate": 2e-3, "train_batch_size": 64}
    train = [make_pair(rng, vocab) for _ in range(3000)]
    valid = [make_pair(rng, vocab) for _ in range(600)]
    model = APJFNN(config, len(vocab) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["learning_rate"])
    bs = config["train_batch_size"]
    for epoch in range(8):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for s in range(0, len(train), bs):
            loss = model.calculate_loss(collate(train[s : s + bs]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        model.eval()
        with torch.no_grad():
            interaction = collate(valid)
            scores = model.predict(interaction)
        acc = ((scores > 0.5).float() == interaction["label"]).float().mean().item()
        print(f"epoch {epoch} loss {total / math.ceil(len(train) / bs):.4f} valid AUC {auc(scores, interaction['label']):.3f} acc {acc:.3f}")


if __name__ == "__main__":
    main()
