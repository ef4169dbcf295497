"""Multimodal survival prediction from whole-slide images and genomics (MCAT-style, TCGA-BLCA).

Each slide is a bag of patch features (ResNet-50 truncated, 1024-d) padded to
the largest bag of the batch; each patient also has six genomic signature
groups (tumour suppressors, oncogenes, protein kinases, cell differentiation,
transcription, cytokines) embedded by self-normalising networks.  Genomic
groups attend over the patches (genomic-guided co-attention); the co-attended
tokens, the genomic tokens and a gated attention-MIL pooling over all patches
are fused into discrete-time hazards trained with the NLL survival loss.

Source: conventions.md §1 (direction cheat-sheet, values in the wild), §2.3, §5 item 5 (TransformerLens PR #366, §3 item 20); seed masked_fill_inplace.txt (例子).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SIGNATURE_SIZES = (84, 314, 526, 712, 1395, 223)
N_BINS = 4


def snn_block(d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, d_out), nn.ELU(), nn.AlphaDropout(0.25))


class GatedAttentionPool(nn.Module):
    def __init__(self, d, d_att=32, dropout=0.25):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(d, d_att), nn.Tanh(), nn.Dropout(dropout))
        self.b = nn.Sequential(nn.Linear(d, d_att), nn.Sigmoid(), nn.Dropout(dropout))
        self.c = nn.Linear(d_att, 1)

    def forward(self, h, keep=None):
        A = self.c(self.a(h) * self.b(h)).squeeze(-1)
        if keep is not None:
            A = A.masked_fill(~keep, -1e-20)  # expect: MC516 weak
        A = torch.softmax(A, dim=-1)
        return (A.unsqueeze(-1) * h).sum(1), A


class MCAT(nn.Module):
    def __init__(self, d_patch=1024, d=64, n_heads=1, dropout=0.25):
        super().__init__()
        self.patch_fc = nn.Sequential(nn.Linear(d_patch, d), nn.ReLU(), nn.Dropout(dropout))
        self.sig_nets = nn.ModuleList([nn.Sequential(snn_block(s, d), snn_block(d, d)) for s in SIGNATURE_SIZES])
        self.coattn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        enc = lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, activation="relu", batch_first=True), 1,
            enable_nested_tensor=False)
        self.path_transformer = enc()
        self.omic_transformer = enc()
        self.path_pool = GatedAttentionPool(d)
        self.omic_pool = GatedAttentionPool(d)
        self.bag_pool = GatedAttentionPool(d)
        self.classifier = nn.Sequential(nn.Linear(3 * d, d), nn.ReLU(), nn.Linear(d, N_BINS))

    def forward(self, patches, bag_mask, omics):
        h_path = self.patch_fc(patches)
        h_omic = torch.stack([net(x) for net, x in zip(self.sig_nets, omics)], dim=1)
        h_co, A_co = self.coattn(h_omic, h_path, h_path, key_padding_mask=~bag_mask)
        h_co = self.path_transformer(h_co)
        h_omic = self.omic_transformer(h_omic)
        z_path, _ = self.path_pool(h_co)
        z_omic, _ = self.omic_pool(h_omic)
        z_bag, A_bag = self.bag_pool(h_path, bag_mask)
        logits = self.classifier(torch.cat([z_path, z_omic, z_bag], dim=-1))
        hazards = torch.sigmoid(logits)
        surv = torch.cumprod(1 - hazards, dim=1)
        return hazards, surv, {"coattn": A_co, "bag": A_bag}


def nll_surv_loss(hazards, surv, y_disc, censored, alpha=0.4, eps=1e-7):
    y = y_disc.view(-1, 1)
    c = censored.view(-1, 1).float()
    s_padded = torch.cat([torch.ones_like(c), surv], dim=1)
    uncensored = -(1 - c) * (torch.log(torch.gather(s_padded, 1, y).clamp(min=eps)) +
                             torch.log(torch.gather(hazards, 1, y).clamp(min=eps)))
    censored_term = -c * torch.log(torch.gather(s_padded, 1, y + 1).clamp(min=eps))
    neg_l = censored_term + uncensored
    return ((1 - alpha) * neg_l + alpha * uncensored).mean()


def concordance_index(risk, times, censored):
    num, den = 0.0, 0.0
    for i in range(len(risk)):
        if censored[i]:
            continue
        later = times > times[i]
        den += later.sum().item()
        num += ((risk[i] > risk[later]).float().sum() + 0.5 * (risk[i] == risk[later]).float().sum()).item()
    return num / max(den, 1.0)


def collate_bags(bags):
    n = max(b.size(0) for b in bags)
    patches = torch.zeros(len(bags), n, bags[0].size(1))
    bag_mask = torch.zeros(len(bags), n, dtype=torch.bool)
    for i, b in enumerate(bags):
        patches[i, :b.size(0)] = b
        bag_mask[i, :b.size(0)] = True
    return patches, bag_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    sizes = [37, 12, 25, 50]
    patches, bag_mask = collate_bags([torch.randn(n, 1024, generator=g) for n in sizes])
    omics = [torch.randn(len(sizes), s, generator=g) for s in SIGNATURE_SIZES]
    times = torch.tensor([14.0, 40.0, 7.0, 61.0])
    y_disc = torch.bucketize(times, torch.tensor([12.0, 24.0, 48.0]))
    censored = torch.tensor([0, 1, 0, 1])
    model = MCAT()
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, weight_decay=1e-5)
    for step in range(4):
        hazards, surv, _ = model(patches, bag_mask, omics)
        loss = nll_surv_loss(hazards, surv, y_disc, censored)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        hazards, surv, att = model(patches, bag_mask, omics)
    risk = -surv.sum(dim=1)
    print("loss", round(loss.item(), 4), "c-index", round(concordance_index(risk, times, censored), 3))
