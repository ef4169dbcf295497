"""Natural language inference (entailment / neutral / contradiction) with ESIM.

A PyTorch port of the Theano code of ESIM (lukecq1231/nli, Chen et al. 2017, itself built on
dl4mt's `prepare_data` and `param_init_*` conventions): batches are time-major, `prepare_data`
returns float32 0/1 masks of shape (maxlen, n_samples) beside the int64 word ids, the BiLSTM
encoders and the composition layer read them, `batched_dot` and `dimshuffle` became `torch.bmm`
and `permute`, and the pooled vectors are the masked mean and max over time. Premises and
hypotheses are generated from a small lexicon with hypernyms.

Source: pytorch/pytorch#103963 (conventions.md 3.6), huggingface/transformers#32195 (3.25)
"""

import random

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SUBJECTS = {"man": "person", "woman": "person", "boy": "child", "girl": "child"}
OBJECTS = {"guitar": "instrument", "piano": "instrument", "bike": "vehicle", "horse": "animal", "apple": "fruit"}
VERBS = {"guitar": "playing", "piano": "playing", "bike": "riding", "horse": "riding", "apple": "eating"}
PLACES = ["in the park", "at home", "on the beach", "near the river"]
LABELS = ["entailment", "neutral", "contradiction"]


def make_pair(rng):
    subj, obj = rng.choice(list(SUBJECTS)), rng.choice(list(OBJECTS))
    premise = f"a {subj} is {VERBS[obj]} a {obj}"
    if rng.random() < 0.5:
        premise += " " + rng.choice(PLACES)
    label = rng.randrange(3)
    if label == 0:
        hypothesis = f"a {SUBJECTS[subj]} is {VERBS[obj]} a {OBJECTS[obj]}"
    elif label == 1:
        hypothesis = f"a {subj} is {VERBS[obj]} a {obj} for the first time"
    else:
        hypothesis = f"nobody is {VERBS[obj]} a {obj}" if rng.random() < 0.5 else f"a {subj} is sleeping"
    return premise.split(), hypothesis.split(), label


def prepare_data(seqs_x, seqs_y, labels):
    lengths_x, lengths_y = [len(s) for s in seqs_x], [len(s) for s in seqs_y]
    n_samples = len(seqs_x)
    x = numpy.zeros((max(lengths_x), n_samples)).astype("int64")
    y = numpy.zeros((max(lengths_y), n_samples)).astype("int64")
    x_mask = numpy.zeros((max(lengths_x), n_samples)).astype("float32")
    y_mask = numpy.zeros((max(lengths_y), n_samples)).astype("float32")
    for idx, (s_x, s_y) in enumerate(zip(seqs_x, seqs_y)):
        x[:lengths_x[idx], idx] = s_x
        x_mask[:lengths_x[idx], idx] = 1.0
        y[:lengths_y[idx], idx] = s_y
        y_mask[:lengths_y[idx], idx] = 1.0
    return (torch.from_numpy(x), torch.from_numpy(x_mask), torch.from_numpy(y), torch.from_numpy(y_mask),
            torch.tensor(labels))


def masked_softmax(scores, mask, dim):
    return torch.softmax(scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min), dim=dim)


class ESIM(nn.Module):
    def __init__(self, n_words, dim_word=48, dim=48):
        super().__init__()
        self.Wemb = nn.Embedding(n_words, dim_word)
        self.encoder = nn.LSTM(dim_word, dim, bidirectional=True)
        self.projection = nn.Sequential(nn.Linear(8 * dim, dim), nn.ReLU())
        self.composition = nn.LSTM(dim, dim, bidirectional=True)
        self.ff_logit = nn.Sequential(nn.Linear(8 * dim, dim), nn.Tanh(), nn.Linear(dim, len(LABELS)))

    def bilstm(self, lstm, emb, mask):
        lengths = mask.sum(0).long()
        packed = pack_padded_sequence(emb, lengths, enforce_sorted=False)
        ctx, _ = pad_packed_sequence(lstm(packed)[0], total_length=emb.shape[0])
        return ctx

    def local_inference(self, ctx1, x_mask, ctx2, y_mask):
        weight_matrix = torch.bmm(ctx1.permute(1, 0, 2), ctx2.permute(1, 2, 0))
        alpha = masked_softmax(weight_matrix, y_mask.permute(1, 0)[:, None, :], dim=2)
        beta = masked_softmax(weight_matrix, x_mask.permute(1, 0)[:, :, None], dim=1)
        ctx1_tilde = torch.bmm(alpha, ctx2.permute(1, 0, 2)).permute(1, 0, 2)
        ctx2_tilde = torch.bmm(beta.permute(0, 2, 1), ctx1.permute(1, 0, 2)).permute(1, 0, 2)
        return ctx1_tilde, ctx2_tilde

    def pool(self, ctx, mask):
        mean = (ctx * mask[:, :, None]).sum(0) / mask.sum(0)[:, None]
        maximum = ctx.masked_fill(mask[:, :, None] == 0, float("-inf")).max(0).values
        return torch.cat([mean, maximum], dim=-1)

    def forward(self, x, x_mask, y, y_mask):
        ctx1 = self.bilstm(self.encoder, self.Wemb(x), x_mask)
        ctx2 = self.bilstm(self.encoder, self.Wemb(y), y_mask)
        ctx1_tilde, ctx2_tilde = self.local_inference(ctx1, x_mask, ctx2, y_mask)
        m1 = self.projection(torch.cat([ctx1, ctx1_tilde, ctx1 - ctx1_tilde, ctx1 * ctx1_tilde], dim=-1))
        m2 = self.projection(torch.cat([ctx2, ctx2_tilde, ctx2 - ctx2_tilde, ctx2 * ctx2_tilde], dim=-1))
        v1 = self.pool(self.bilstm(self.composition, m1, x_mask), x_mask)
        v2 = self.pool(self.bilstm(self.composition, m2, y_mask), y_mask)
        return self.ff_logit(torch.cat([v1, v2], dim=-1))


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    words = sorted({w for _ in range(2000) for s in make_pair(rng)[:2] for w in s})
    word_dict = {w: i + 1 for i, w in enumerate(words)}
    encode = lambda pairs: prepare_data([[word_dict[w] for w in p] for p, _, _ in pairs],
                                        [[word_dict[w] for w in h] for _, h, _ in pairs], [l for _, _, l in pairs])
    model = ESIM(len(word_dict) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=4e-4)
    for uidx in range(300):
        x, x_mask, y, y_mask, l = encode([make_pair(rng) for _ in range(32)])
        cost = F.cross_entropy(model(x, x_mask, y, y_mask), l)
        optimizer.zero_grad()
        cost.backward()
        optimizer.step()
    model.eval()
    test = [make_pair(rng) for _ in range(500)]
    with torch.no_grad():
        x, x_mask, y, y_mask, l = encode(test)
        logits = model(x, x_mask, y, y_mask)
        alone = model(*encode(test[:1])[:4])
    accuracy = (logits.argmax(-1) == l).float().mean()
    print("cost %.3f  test accuracy %.3f  batched vs alone %.2e" % (cost.item(), accuracy, (alone - logits[:1]).abs().max()))


if __name__ == "__main__":
    main()
