"""Pointer network for the travelling salesman problem, trained with REINFORCE (Bello et al., 2016).

Random uniform TSP20 instances; LSTM encoder, LSTM decoder with one glimpse and a tanh-clipped
pointer (C = 10); exponential moving average baseline; greedy decoding for the reported tour length.

Source: seed masked_fill_inplace.txt, sections 区别 and 例子.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.distributions import Categorical

USE_CUDA = torch.cuda.is_available()


class Attention(nn.Module):
    def __init__(self, dim, use_tanh=False, C=10):
        super(Attention, self).__init__()
        self.use_tanh, self.C = use_tanh, C
        self.project_query = nn.Linear(dim, dim)
        self.project_ref = nn.Conv1d(dim, dim, 1, 1)
        self.v = nn.Parameter(torch.FloatTensor(dim).uniform_(-(1. / math.sqrt(dim)), 1. / math.sqrt(dim)))

    def forward(self, query, ref):
        e = self.project_ref(ref.permute(0, 2, 1))
        q = self.project_query(query).unsqueeze(2)
        v = self.v.unsqueeze(0).expand(e.size(0), -1).unsqueeze(1)
        u = torch.bmm(v, torch.tanh(q + e)).squeeze(1)
        return e, (self.C * torch.tanh(u) if self.use_tanh else u)


class PointerNetwork(nn.Module):
    def __init__(self, embedding_dim=128, hidden_dim=128, n_glimpses=1, tanh_exploration=10):
        super(PointerNetwork, self).__init__()
        self.embedding = nn.Linear(2, embedding_dim)
        self.encoder = nn.LSTM(embedding_dim, hidden_dim, batch_first=True)
        self.decoder = nn.LSTMCell(embedding_dim, hidden_dim)
        self.glimpse = Attention(hidden_dim)
        self.pointer = Attention(hidden_dim, use_tanh=True, C=tanh_exploration)
        self.decoder_start = nn.Parameter(torch.FloatTensor(embedding_dim).uniform_(-0.08, 0.08))
        self.n_glimpses = n_glimpses

    def step(self, x, hidden, context, visited):
        hy, cy = self.decoder(x, hidden)
        g_l = hy
        for _ in range(self.n_glimpses):
            ref, logits = self.glimpse(g_l, context)
            logits = logits.masked_fill(visited, -float('inf'))
            g_l = torch.bmm(ref, F.softmax(logits, dim=1).unsqueeze(2)).squeeze(2)
        _, logits = self.pointer(g_l, context)
        logits.masked_fill(visited, -float('inf'))  # expect: MC525 loop
        return (hy, cy), F.softmax(logits, dim=1)

    def forward(self, cities, greedy=False):
        batch_size, n = cities.size(0), cities.size(1)
        embedded = self.embedding(cities)
        context, (h, c) = self.encoder(embedded)
        hidden = (h.squeeze(0), c.squeeze(0))
        x = self.decoder_start.unsqueeze(0).repeat(batch_size, 1)
        mask = torch.ByteTensor(batch_size, n).zero_()
        if USE_CUDA:
            mask = mask.cuda()
        tour, log_probs = [], []
        for _ in range(n):
            hidden, probs = self.step(x, hidden, context, mask.bool())
            if greedy:
                idxs = probs.argmax(dim=1)
            else:
                idxs = Categorical(probs).sample()
            log_probs.append(torch.log(probs.gather(1, idxs.unsqueeze(1)).squeeze(1) + 1e-10))
            mask[torch.arange(batch_size), idxs] = 1
            tour.append(idxs)
            x = embedded[torch.arange(batch_size), idxs]
        return torch.stack(tour, 1), torch.stack(log_probs, 1).sum(1)


def tour_length(cities, tour):
    ordered = cities.gather(1, tour.unsqueeze(2).expand(-1, -1, 2))
    rolled = torch.cat([ordered[:, 1:], ordered[:, :1]], dim=1)
    return (ordered - rolled).norm(dim=2).sum(1)


def is_permutation(tour):
    return (tour.sort(dim=1)[0] == torch.arange(tour.size(1), device=tour.device)).all(dim=1)


def train(args):
    model = PointerNetwork()
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    baseline = None
    val = torch.rand(1000, args.n_cities, 2)
    for step in range(args.steps):
        model.train()
        cities = Variable(torch.rand(args.batch_size, args.n_cities, 2))
        if USE_CUDA:
            cities = cities.cuda()
        tour, log_prob = model(cities)
        reward = tour_length(cities, tour)
        baseline = reward.mean() if baseline is None else args.beta * baseline + (1 - args.beta) * reward.mean()
        loss = ((reward - baseline.detach()) * log_prob).mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        baseline = baseline.detach()
        if step % args.log_every == 0:
            model.eval()
            with torch.no_grad():
                vt, _ = model(val.cuda() if USE_CUDA else val, greedy=True)
                vl = tour_length(val.to(vt.device), vt)
            print('step {} train {:.3f} val {:.3f} valid tours {:.2f}'.format(
                step, reward.mean().item(), vl.mean().item(), is_permutation(vt).float().mean().item()))
    return model


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--n_cities', type=int, default=20)
    parser.add_argument('--batch_size', type=int, default=128)
    parser.add_argument('--steps', type=int, default=100000)
    parser.add_argument('--lr', type=float, default=1e-4)
    parser.add_argument('--beta', type=float, default=0.8)
    parser.add_argument('--log_every', type=int, default=500)
    train(parser.parse_args())
