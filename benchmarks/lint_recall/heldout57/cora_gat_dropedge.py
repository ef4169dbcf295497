"""Graph attention network (Velickovic et al., 2018) on the Cora citation graph, with DropEdge.

pyGAT layout: dense adjacency, 8 heads of 8 hidden units, one output head, the usual
140 / 500 / 1000 split and early stopping on the validation loss.

Source: seed masked_fill_inplace.txt, section 与模型缓冲区的配合.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

USE_CUDA = torch.cuda.is_available()


def encode_onehot(labels):
    classes = sorted(set(labels))
    return np.array([[float(c == l) for c in classes] for l in labels], dtype=np.float32)


def load_data(path='./data/cora/', dataset='cora'):
    idx_features_labels = np.genfromtxt('{}{}.content'.format(path, dataset), dtype=np.dtype(str))
    features = np.array(idx_features_labels[:, 1:-1], dtype=np.float32)
    labels = encode_onehot(idx_features_labels[:, -1])
    idx_map = dict((int(j), i) for i, j in enumerate(idx_features_labels[:, 0]))
    edges = np.genfromtxt('{}{}.cites'.format(path, dataset), dtype=np.int32)
    adj = np.eye(labels.shape[0], dtype=np.float32)
    for a, b in edges:
        adj[idx_map[a], idx_map[b]] = adj[idx_map[b], idx_map[a]] = 1.0
    features = features / np.maximum(features.sum(1, keepdims=True), 1.0)
    return (torch.FloatTensor(adj), torch.FloatTensor(features), torch.LongTensor(np.where(labels)[1]),
            torch.arange(140), torch.arange(200, 500), torch.arange(500, 1500))


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super(GraphAttentionLayer, self).__init__()
        self.dropout, self.concat = dropout, concat
        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2 * out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)
        self.leakyrelu = nn.LeakyReLU(alpha)
        self.out_features = out_features

    def forward(self, h, adj_bias):
        Wh = torch.mm(h, self.W)
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        e = self.leakyrelu(Wh1 + Wh2.T)
        attention = F.softmax(e + adj_bias, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)
        return F.elu(h_prime) if self.concat else h_prime


class GAT(nn.Module):
    def __init__(self, adj, nfeat, nhid, nclass, dropout, alpha, nheads, edge_drop):
        super(GAT, self).__init__()
        self.dropout, self.edge_drop = dropout, edge_drop
        self.attentions = nn.ModuleList([GraphAttentionLayer(nfeat, nhid, dropout, alpha) for _ in range(nheads)])
        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout, alpha, concat=False)
        self.register_buffer('adj_bias', torch.zeros_like(adj).masked_fill(adj == 0, float('-inf')))

    def forward(self, x):
        bias = self.adj_bias
        if self.training and self.edge_drop > 0:
            dropped = (torch.rand_like(bias) < self.edge_drop) & torch.isfinite(bias)
            dropped.fill_diagonal_(False)
            bias = self.adj_bias.masked_fill_(dropped, float('-inf'))  # expect: MC524 buffer
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, bias) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        return F.log_softmax(F.elu(self.out_att(x, bias)), dim=1)


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    return preds.eq(labels).double().sum() / len(labels)


def train(args):
    adj, features, labels, idx_train, idx_val, idx_test = load_data()
    model = GAT(adj, features.shape[1], args.hidden, int(labels.max()) + 1, args.dropout, args.alpha,
                args.nb_heads, args.edge_drop)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    if USE_CUDA:
        model.cuda()
        features, labels = features.cuda(), labels.cuda()
    features, labels = Variable(features), Variable(labels)
    best, bad_counter, t0 = float('inf'), 0, time.time()
    for epoch in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            output = model(features)
        loss_val = F.nll_loss(output[idx_val], labels[idx_val]).item()
        print('Epoch: {:04d} loss_train: {:.4f} loss_val: {:.4f} acc_val: {:.4f}'.format(
            epoch + 1, loss_train.item(), loss_val, accuracy(output[idx_val], labels[idx_val]).item()))
        if loss_val < best:
            best, bad_counter = loss_val, 0
            torch.save(model.state_dict(), 'best_gat.pkl')
        else:
            bad_counter += 1
            if bad_counter == args.patience:
                break
    model.load_state_dict(torch.load('best_gat.pkl'))
    model.eval()
    with torch.no_grad():
        output = model(features)
    print('Test acc: {:.4f} ({:.1f}s)'.format(accuracy(output[idx_test], labels[idx_test]).item(), time.time() - t0))


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=10000)
    parser.add_argument('--lr', type=float, default=0.005)
    parser.add_argument('--weight_decay', type=float, default=5e-4)
    parser.add_argument('--hidden', type=int, default=8)
    parser.add_argument('--nb_heads', type=int, default=8)
    parser.add_argument('--dropout', type=float, default=0.6)
    parser.add_argument('--alpha', type=float, default=0.2)
    parser.add_argument('--edge_drop', type=float, default=0.1)
    parser.add_argument('--patience', type=int, default=100)
    train(parser.parse_args())
