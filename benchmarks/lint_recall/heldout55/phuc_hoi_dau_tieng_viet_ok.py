"""Phục hồi dấu thanh cho văn bản tiếng Việt không dấu (gán nhãn theo âm tiết).

Mỗi âm tiết không dấu là một token; mô hình dự đoán một trong sáu thanh (ngang, huyền, sắc,
hỏi, ngã, nặng) cho từng âm tiết dựa vào ngữ cảnh hai bên. Lô dữ liệu được gói trong
dataclass ``LoDuLieu``; mặt nạ chú ý được dựng sẵn trong hàm gộp lô.
Cấu hình đặt trong từ điển ``CAU_HINH``; dữ liệu minh hoạ là câu tổng hợp.

Source: seed self_attention_mask_guide.txt §3 và §7 Q3
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

CAU_HINH = {
    "so_am_tiet": 100,
    "so_thanh": 6,
    "kich_thuoc_an": 48,
    "so_dau": 4,
    "so_lop": 2,
    "do_dai_toi_da": 32,
    "toc_do_hoc": 2e-3,
    "so_buoc": 200,
}
DEM = 0
BO_QUA = -100


@dataclass
class LoDuLieu:
    am_tiet: torch.Tensor
    thanh: torch.Tensor
    mat_na: torch.Tensor


def sinh_cau(rng):
    n = rng.randint(4, CAU_HINH["do_dai_toi_da"])
    am_tiet = [rng.randrange(1, CAU_HINH["so_am_tiet"]) for _ in range(n)]
    thanh = [a % 3 + 3 * ((am_tiet[i - 1] if i > 0 else 0) % 2) for i, a in enumerate(am_tiet)]
    return am_tiet, thanh


def gop_lo(cau):
    n = max(len(a) for a, _ in cau)
    am_tiet = torch.full((len(cau), n), DEM, dtype=torch.long)
    thanh = torch.full((len(cau), n), BO_QUA, dtype=torch.long)
    for i, (a, t) in enumerate(cau):
        am_tiet[i, : len(a)] = torch.tensor(a)
        thanh[i, : len(t)] = torch.tensor(t)
    mat_na = torch.zeros(len(cau), n).masked_fill(am_tiet == DEM, float("-inf"))
    return LoDuLieu(am_tiet, thanh, mat_na)


class TuChuY(nn.Module):
    def __init__(self, d, so_dau):
        super().__init__()
        self.so_dau = so_dau
        self.qkv = nn.Linear(d, 3 * d)
        self.ra = nn.Linear(d, d)

    def forward(self, x, mat_na):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.so_dau, d // self.so_dau).permute(2, 0, 3, 1, 4)
        diem = q @ k.transpose(-2, -1) / math.sqrt(d // self.so_dau)
        diem = diem + mat_na[:, None, None, :]
        trong_so = diem.softmax(dim=-1)
        return self.ra((trong_so @ v).transpose(1, 2).reshape(b, n, d))


class LopMaHoa(nn.Module):
    def __init__(self, d, so_dau):
        super().__init__()
        self.chu_y = TuChuY(d, so_dau)
        self.chuan1 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.chuan2 = nn.LayerNorm(d)

    def forward(self, x, mat_na):
        x = self.chuan1(x + self.chu_y(x, mat_na))
        return self.chuan2(x + self.mlp(x))


class MoHinhBoDau(nn.Module):
    def __init__(self, ch):
        super().__init__()
        d = ch["kich_thuoc_an"]
        self.nhung = nn.Embedding(ch["so_am_tiet"], d, padding_idx=DEM)
        self.vi_tri = nn.Embedding(ch["do_dai_toi_da"], d)
        self.cac_lop = nn.ModuleList([LopMaHoa(d, ch["so_dau"]) for _ in range(ch["so_lop"])])
        self.phan_loai = nn.Linear(d, ch["so_thanh"])

    def forward(self, lo: LoDuLieu):
        h = self.nhung(lo.am_tiet) + self.vi_tri(torch.arange(lo.am_tiet.shape[1]))
        for lop in self.cac_lop:
            h = lop(h, lo.mat_na)
        return self.phan_loai(h)


def huan_luyen():
    torch.manual_seed(0)
    rng = random.Random(0)
    mo_hinh = MoHinhBoDau(CAU_HINH)
    toi_uu = torch.optim.Adam(mo_hinh.parameters(), lr=CAU_HINH["toc_do_hoc"])
    for buoc in range(CAU_HINH["so_buoc"]):
        lo = gop_lo([sinh_cau(rng) for _ in range(32)])
        mat_mat = F.cross_entropy(mo_hinh(lo).reshape(-1, CAU_HINH["so_thanh"]), lo.thanh.reshape(-1),
                                  ignore_index=BO_QUA)
        toi_uu.zero_grad()
        mat_mat.backward()
        toi_uu.step()
        if buoc % 50 == 0:
            print(f"bước {buoc}: mất mát {mat_mat.item():.3f}")
    lo = gop_lo([sinh_cau(random.Random(31_337 + i)) for i in range(200)])
    with torch.no_grad():
        du_doan = mo_hinh(lo).argmax(-1)
    hop_le = lo.thanh != BO_QUA
    print(f"độ chính xác thanh điệu: {(du_doan[hop_le] == lo.thanh[hop_le]).float().mean().item():.3f}")


if __name__ == "__main__":
    huan_luyen()
