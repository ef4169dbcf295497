"""Bottom-up top-down VQA on VQA v2 (Anderson et al., 2018; Teney et al. tips and tricks).

Faster R-CNN features: 10 to 100 boxes per image, stored zero-padded to 100 with num_boxes
alongside; GloVe-initialised question GRU; soft-score BCE over 3129 answers.

Source: conventions.md section 2.9 and section 1 (direction cheat-sheet); pytorch/pytorch#103963
(conventions.md section 3 item 6).
"""
import argparse

import h5py
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.nn.utils.weight_norm import weight_norm

USE_CUDA = torch.cuda.is_available()


def box_padding(num_boxes, k):
    return torch.arange(k, device=num_boxes.device).unsqueeze(0) >= num_boxes.unsqueeze(1)


class FCNet(nn.Module):
    def __init__(self, dims, dropout=0.0):
        super(FCNet, self).__init__()
        layers = []
        for in_dim, out_dim in zip(dims[:-1], dims[1:]):
            layers += [nn.Dropout(dropout), weight_norm(nn.Linear(in_dim, out_dim), dim=None), nn.ReLU()]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


class QuestionEmbedding(nn.Module):
    def __init__(self, ntoken, emb_dim=300, num_hid=1024):
        super(QuestionEmbedding, self).__init__()
        self.emb = nn.Embedding(ntoken + 1, emb_dim, padding_idx=ntoken)
        self.rnn = nn.GRU(emb_dim, num_hid, batch_first=True)

    def forward(self, q, q_len):
        packed = pack_padded_sequence(self.emb(q), q_len.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.rnn(packed)
        return hidden[-1]


class NewAttention(nn.Module):
    def __init__(self, v_dim, q_dim, num_hid, dropout=0.2):
        super(NewAttention, self).__init__()
        self.v_proj = FCNet([v_dim, num_hid])
        self.q_proj = FCNet([q_dim, num_hid])
        self.dropout = nn.Dropout(dropout)
        self.linear = weight_norm(nn.Linear(num_hid, 1), dim=None)

    def forward(self, v, q, box_pad):
        k = v.size(1)
        joint = self.v_proj(v) * self.q_proj(q).unsqueeze(1).repeat(1, k, 1)
        logits = self.linear(self.dropout(joint))
        logits = logits.masked_fill(box_pad.unsqueeze(2), -float('inf'))
        return F.softmax(logits, dim=1)


class BaseModel(nn.Module):
    def __init__(self, ntoken, num_ans, v_dim=2048, num_hid=1024):
        super(BaseModel, self).__init__()
        self.q_emb = QuestionEmbedding(ntoken, num_hid=num_hid)
        self.v_att = NewAttention(v_dim, num_hid, num_hid)
        self.q_net = FCNet([num_hid, num_hid])
        self.v_net = FCNet([v_dim, num_hid])
        self.classifier = nn.Sequential(weight_norm(nn.Linear(num_hid, 2 * num_hid), dim=None), nn.ReLU(),
                                        nn.Dropout(0.5), weight_norm(nn.Linear(2 * num_hid, num_ans), dim=None))

    def forward(self, v, num_boxes, q, q_len):
        q_emb = self.q_emb(q, q_len)
        pad = box_padding(num_boxes, v.size(1))
        att = self.v_att(v, q_emb, pad)
        v_emb = (att * v).sum(1)
        return self.classifier(self.q_net(q_emb) * self.v_net(v_emb))


def instance_bce_with_logits(logits, labels):
    return F.binary_cross_entropy_with_logits(logits, labels) * labels.size(1)


def compute_score_with_logits(logits, labels):
    one_hots = torch.zeros_like(labels).scatter_(1, logits.argmax(1, keepdim=True), 1)
    return (one_hots * labels).sum()


class VQAFeatureDataset(torch.utils.data.Dataset):
    def __init__(self, h5_path, entries):
        self.features = h5py.File(h5_path, 'r')['image_features']
        self.entries = entries

    def __len__(self):
        return len(self.entries)

    def __getitem__(self, i):
        e = self.entries[i]
        v = torch.from_numpy(self.features[e['image_index']]).type(torch.FloatTensor)
        return v, torch.tensor(e['num_boxes']), torch.LongTensor(e['q_tokens']), torch.tensor(e['q_len']), e['target']


def evaluate(model, loader):
    score, n = 0.0, 0
    model.eval()
    for v, num_boxes, q, q_len, target in loader:
        v = Variable(v, volatile=True)
        with torch.no_grad():
            pred = model(v, num_boxes, q, q_len)
        score += compute_score_with_logits(pred, target).item()
        n += v.size(0)
    return 100.0 * score / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=13)
    parser.add_argument('--batch_size', type=int, default=512)
    parser.add_argument('--ntoken', type=int, default=19901)
    parser.add_argument('--num_ans', type=int, default=3129)
    args = parser.parse_args()
    train_entries, val_entries = torch.load('data/vqa2_entries.pt')
    train_loader = torch.utils.data.DataLoader(VQAFeatureDataset('data/train36.hdf5', train_entries),
                                               args.batch_size, shuffle=True, num_workers=4)
    val_loader = torch.utils.data.DataLoader(VQAFeatureDataset('data/val36.hdf5', val_entries), args.batch_size)
    model = BaseModel(args.ntoken, args.num_ans)
    if USE_CUDA:
        model = model.cuda()
    optim = torch.optim.Adamax(model.parameters())
    for epoch in range(args.epochs):
        model.train()
        for v, num_boxes, q, q_len, target in train_loader:
            loss = instance_bce_with_logits(model(v, num_boxes, q, q_len), target)
            optim.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optim.step()
        print('epoch {} val score {:.2f}'.format(epoch, evaluate(model, val_loader)))


if __name__ == '__main__':
    main()
