"""Image-text matching with Stacked Cross Attention (SCAN, text-to-image), Flickr30K style.

Bottom-up region features (a variable number of boxes per image, zero-padded)
and a bi-GRU over caption words; every word attends over the regions and
the pair score is the LogSumExp of word-region relevances, trained with the
VSE++ hinge loss on the hardest negatives.

Source: seed masked_fill_inplace.txt (区别: masked_fill returns a new tensor, masked_fill_ works in place), conventions.md §2.3.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def get_opt(argv=()):
    parser = argparse.ArgumentParser()
    parser.add_argument("--img_dim", type=int, default=64)
    parser.add_argument("--word_dim", type=int, default=32)
    parser.add_argument("--embed_size", type=int, default=48)
    parser.add_argument("--vocab_size", type=int, default=300)
    parser.add_argument("--lambda_softmax", type=float, default=9.0)
    parser.add_argument("--lambda_lse", type=float, default=6.0)
    parser.add_argument("--margin", type=float, default=0.2)
    parser.add_argument("--max_violation", action="store_true", default=True)
    return parser.parse_args(list(argv))


def l2norm(X, dim, eps=1e-8):
    norm = torch.pow(X, 2).sum(dim=dim, keepdim=True).sqrt() + eps
    return torch.div(X, norm)


class EncoderImagePrecomp(nn.Module):
    def __init__(self, img_dim, embed_size):
        super().__init__()
        self.fc = nn.Linear(img_dim, embed_size)

    def forward(self, images):
        features = self.fc(images)
        return l2norm(features, dim=-1)


class EncoderText(nn.Module):
    def __init__(self, vocab_size, word_dim, embed_size):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.rnn = nn.GRU(word_dim, embed_size, 1, batch_first=True, bidirectional=True)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.embed(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        cap_emb, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        half = cap_emb.size(2) // 2
        cap_emb = (cap_emb[:, :, :half] + cap_emb[:, :, half:]) / 2
        return l2norm(cap_emb, dim=-1)


def func_attention(query, context, context_keep, smooth):
    queryT = torch.transpose(query, 1, 2)
    attn = torch.bmm(context, queryT)
    attn = nn.LeakyReLU(0.1)(attn)
    attn = l2norm(attn, 2)
    attn = torch.transpose(attn, 1, 2).contiguous()
    attn = attn * smooth
    attn.masked_fill(~context_keep[:, None, :], float("-inf"))  # expect: MC525 discarded
    attn = F.softmax(attn, dim=2)
    attnT = torch.transpose(attn, 1, 2).contiguous()
    contextT = torch.transpose(context, 1, 2)
    weightedContext = torch.bmm(contextT, attnT)
    return torch.transpose(weightedContext, 1, 2), attn


def xattn_score_t2i(images, region_keep, captions, cap_lens, opt):
    similarities = []
    n_image, n_caption = images.size(0), captions.size(0)
    for i in range(n_caption):
        n_word = int(cap_lens[i])
        cap_i_expand = captions[i, :n_word, :].unsqueeze(0).repeat(n_image, 1, 1)
        weiContext, _ = func_attention(cap_i_expand, images, region_keep, smooth=opt.lambda_softmax)
        row_sim = F.cosine_similarity(cap_i_expand, weiContext, dim=2)
        row_sim = row_sim.mul_(opt.lambda_lse).exp_().sum(dim=1, keepdim=True)
        similarities.append(torch.log(row_sim) / opt.lambda_lse)
    return torch.cat(similarities, 1)


class ContrastiveLoss(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def forward(self, im, region_keep, s, s_l):
        scores = xattn_score_t2i(im, region_keep, s, s_l, self.opt)
        diagonal = scores.diag().view(im.size(0), 1)
        d1 = diagonal.expand_as(scores)
        d2 = diagonal.t().expand_as(scores)
        cost_s = (self.opt.margin + scores - d1).clamp(min=0)
        cost_im = (self.opt.margin + scores - d2).clamp(min=0)
        I = torch.eye(scores.size(0), dtype=torch.bool, device=scores.device)
        cost_s = cost_s.masked_fill(I, 0)
        cost_im = cost_im.masked_fill(I, 0)
        if self.opt.max_violation:
            cost_s = cost_s.max(1)[0]
            cost_im = cost_im.max(0)[0]
        return cost_s.sum() + cost_im.sum()


class SCAN(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.img_enc = EncoderImagePrecomp(opt.img_dim, opt.embed_size)
        self.txt_enc = EncoderText(opt.vocab_size, opt.word_dim, opt.embed_size)
        self.criterion = ContrastiveLoss(opt)
        self.opt = opt

    def forward_emb(self, images, region_keep, captions, lengths):
        return self.img_enc(images), self.txt_enc(captions, lengths)

    def forward(self, images, region_keep, captions, lengths):
        img_emb, cap_emb = self.forward_emb(images, region_keep, captions, lengths)
        return self.criterion(img_emb, region_keep, cap_emb, lengths)

    @torch.no_grad()
    def i2t_recall(self, images, region_keep, captions, lengths):
        img_emb, cap_emb = self.forward_emb(images, region_keep, captions, lengths)
        sims = xattn_score_t2i(img_emb, region_keep, cap_emb, lengths, self.opt)
        return (sims.argmax(dim=1) == torch.arange(sims.size(0))).float().mean().item()


def collate_fn(data):
    images, captions = zip(*data)
    max_regions = max(img.size(0) for img in images)
    feats = torch.zeros(len(images), max_regions, images[0].size(1))
    region_keep = torch.zeros(len(images), max_regions, dtype=torch.bool)
    for i, img in enumerate(images):
        feats[i, : img.size(0)] = img
        region_keep[i, : img.size(0)] = True
    lengths = torch.tensor([len(c) for c in captions])
    targets = torch.zeros(len(captions), int(lengths.max()), dtype=torch.long)
    for i, cap in enumerate(captions):
        targets[i, : len(cap)] = torch.tensor(cap)
    return feats, region_keep, targets, lengths


if __name__ == "__main__":
    torch.manual_seed(0)
    opt = get_opt()
    data = [(torch.randn(n, opt.img_dim), torch.randint(1, opt.vocab_size, (l,)).tolist()) for n, l in [(12, 7), (5, 11), (9, 4), (12, 9)]]
    images, region_keep, captions, lengths = collate_fn(data)
    model = SCAN(opt)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    for step in range(3):
        loss = model(images, region_keep, captions, lengths)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    print("i2t R@1", model.i2t_recall(images, region_keep, captions, lengths))
