"""Handwritten text line recognition on IAM (Aachen split) with a CNN encoder and a Transformer decoder.

Lines are scaled to height 64 and right-padded in width; the CNN reduces the width by 8 and the
decoder predicts characters autoregressively; CER is reported on the validation lines.

Source: conventions.md section 1 (nn.Transformer row); seed self_attention_mask_guide.txt
section 3 (generate_causal_mask) and section 7 Q3.
"""
import argparse
import math

import editdistance
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.autograd import Variable

USE_CUDA = torch.cuda.is_available()
PAD, SOS, EOS = 0, 1, 2
CHARSET = ' !"#&\'()*+,-./0123456789:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'


def generate_square_subsequent_mask(sz):
    return torch.triu(torch.ones(sz, sz), diagonal=1) * float('-inf')  # expect: MC522 helper


def load_line(path, height=64):
    img = Image.open(path).convert('L')
    width = max(1, int(img.size[0] * height / img.size[1]))
    arr = np.asarray(img.resize((width, height)), dtype=np.float32) / 255.0
    return torch.from_numpy(1.0 - arr).type(torch.FloatTensor)


def collate_lines(samples):
    widths = torch.LongTensor([img.size(1) for img, _ in samples])
    images = torch.zeros(len(samples), 1, 64, int(widths.max()))
    max_t = max(len(text) for _, text in samples) + 2
    targets = torch.full((len(samples), max_t), PAD, dtype=torch.long)
    for i, (img, text) in enumerate(samples):
        images[i, 0, :, :img.size(1)] = img
        ids = [SOS] + [CHARSET.index(c) + 3 for c in text] + [EOS]
        targets[i, :len(ids)] = torch.LongTensor(ids)
    return images, widths, targets


class HTRTransformer(nn.Module):
    def __init__(self, d_model=256, nhead=4, num_layers=4, max_len=256):
        super(HTRTransformer, self).__init__()
        chans = [1, 32, 64, 128, d_model]
        blocks = []
        for i in range(4):
            blocks += [nn.Conv2d(chans[i], chans[i + 1], 3, padding=1), nn.BatchNorm2d(chans[i + 1]), nn.ReLU()]
            blocks.append(nn.MaxPool2d(2) if i < 3 else nn.AdaptiveAvgPool2d((1, None)))
        self.cnn = nn.Sequential(*blocks)
        self.pos = nn.Embedding(max_len, d_model)
        self.embed = nn.Embedding(len(CHARSET) + 3, d_model, padding_idx=PAD)
        layer = nn.TransformerDecoderLayer(d_model, nhead, 4 * d_model, 0.1)
        self.decoder = nn.TransformerDecoder(layer, num_layers)
        self.fc = nn.Linear(d_model, len(CHARSET) + 3)
        self.d_model = d_model

    def encode(self, images, widths):
        feats = self.cnn(images).squeeze(2).permute(2, 0, 1)
        steps = torch.arange(feats.size(0), device=feats.device)
        memory = feats + self.pos(steps).unsqueeze(1)
        memory_pad = steps.unsqueeze(0) >= ((widths + 7) // 8).unsqueeze(1)
        return memory, memory_pad

    def decode(self, memory, memory_pad, tgt_in):
        length = tgt_in.size(1)
        steps = torch.arange(length, device=tgt_in.device)
        y = self.embed(tgt_in) * math.sqrt(self.d_model) + self.pos(steps)
        tgt_mask = generate_square_subsequent_mask(length).to(tgt_in.device)
        out = self.decoder(y.transpose(0, 1), memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_pad)
        return self.fc(out.transpose(0, 1))

    def forward(self, images, widths, tgt_in):
        memory, memory_pad = self.encode(images, widths)
        return self.decode(memory, memory_pad, tgt_in)


def predict(model, images, widths, max_len=120):
    model.eval()
    images = Variable(images, volatile=True)
    with torch.no_grad():
        memory, memory_pad = model.encode(images, widths)
        ys = torch.full((images.size(0), 1), SOS, dtype=torch.long, device=images.device)
        for _ in range(max_len):
            nxt = model.decode(memory, memory_pad, ys)[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, nxt], 1)
            if (ys == EOS).any(1).all():
                break
    texts = []
    for seq in ys[:, 1:].tolist():
        seq = seq[:seq.index(EOS)] if EOS in seq else seq
        texts.append(''.join(CHARSET[i - 3] for i in seq if i >= 3))
    return texts


def character_error_rate(model, loader):
    errors, total = 0, 0
    for images, widths, targets in loader:
        for hyp, tgt in zip(predict(model, images, widths), targets.tolist()):
            ref = ''.join(CHARSET[i - 3] for i in tgt if i >= 3)
            errors += editdistance.eval(hyp, ref)
            total += len(ref)
    return errors / max(total, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--train', default='data/iam_train.pt')
    parser.add_argument('--valid', default='data/iam_valid.pt')
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--epochs', type=int, default=100)
    args = parser.parse_args()
    train_loader = torch.utils.data.DataLoader(torch.load(args.train), args.batch_size, shuffle=True,
                                               collate_fn=collate_lines)
    valid_loader = torch.utils.data.DataLoader(torch.load(args.valid), args.batch_size, collate_fn=collate_lines)
    model = HTRTransformer()
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    for epoch in range(args.epochs):
        model.train()
        for images, widths, targets in train_loader:
            logits = model(images, widths, targets[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1), ignore_index=PAD)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print('epoch {} CER {:.4f}'.format(epoch, character_error_rate(model, valid_loader)))


if __name__ == '__main__':
    main()
