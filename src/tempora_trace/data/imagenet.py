"""ImageNet-C, clean ImageNet validation, ImageNet-R/-A (200-class subsets) and ImageNet-V2.

Transforms follow the Tempora reference: ImageNet-C images are stored at 224×224 and are only
centre-cropped; the clean validation set and the natural variants get the standard
resize-256 / centre-crop-224 evaluation transform. Normalisation happens inside the model.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from .streams import ItemBatchSource

# ImageNet-1K class indices of the 200-class subsets, in ascending order (= sorted wnid
# order, so the i-th folder of the dataset is the i-th index). From the official repositories:
# hendrycks/natural-adv-examples (ImageNet-A) and hendrycks/imagenet-r (ImageNet-R).
IMAGENET_A_CLASSES = [
    6, 11, 13, 15, 17, 22, 23, 27, 30, 37, 39, 42, 47, 50, 57, 70, 71, 76, 79, 89, 90, 94, 96, 97, 99, 105, 107,
    108, 110, 113, 124, 125, 130, 132, 143, 144, 150, 151, 207, 234, 235, 254, 277, 283, 287, 291, 295, 298, 301,
    306, 307, 308, 309, 310, 311, 313, 314, 315, 317, 319, 323, 324, 326, 327, 330, 334, 335, 336, 347, 361, 363,
    372, 378, 386, 397, 400, 401, 402, 404, 407, 411, 416, 417, 420, 425, 428, 430, 437, 438, 445, 456, 457, 461,
    462, 470, 472, 483, 486, 488, 492, 496, 514, 516, 528, 530, 539, 542, 543, 549, 552, 557, 561, 562, 569, 572,
    573, 575, 579, 589, 606, 607, 609, 614, 626, 627, 640, 641, 642, 643, 658, 668, 677, 682, 684, 687, 701, 704,
    719, 736, 746, 749, 752, 758, 763, 765, 768, 773, 774, 776, 779, 780, 786, 792, 797, 802, 803, 804, 813, 815,
    820, 823, 831, 833, 835, 839, 845, 847, 850, 859, 862, 870, 879, 880, 888, 890, 897, 900, 907, 913, 924, 932,
    933, 934, 937, 943, 945, 947, 951, 954, 956, 957, 959, 971, 972, 980, 981, 984, 986, 987, 988,
]
IMAGENET_R_CLASSES = [
    1, 2, 4, 6, 8, 9, 11, 13, 22, 23, 26, 29, 31, 39, 47, 63, 71, 76, 79, 84, 90, 94, 96, 97, 99, 100, 105, 107,
    113, 122, 125, 130, 132, 144, 145, 147, 148, 150, 151, 155, 160, 161, 162, 163, 171, 172, 178, 187, 195, 199,
    203, 207, 208, 219, 231, 232, 234, 235, 242, 245, 247, 250, 251, 254, 259, 260, 263, 265, 267, 269, 276, 277,
    281, 288, 289, 291, 292, 293, 296, 299, 301, 308, 309, 310, 311, 314, 315, 319, 323, 327, 330, 334, 335, 337,
    338, 340, 341, 344, 347, 353, 355, 361, 362, 365, 366, 367, 368, 372, 388, 390, 393, 397, 401, 407, 413, 414,
    425, 428, 430, 435, 437, 441, 447, 448, 457, 462, 463, 469, 470, 471, 472, 476, 483, 487, 515, 546, 555, 558,
    570, 579, 583, 587, 593, 594, 596, 609, 613, 617, 621, 629, 637, 657, 658, 701, 717, 724, 763, 768, 774, 776,
    779, 780, 787, 805, 812, 815, 820, 824, 833, 847, 852, 866, 875, 883, 889, 895, 907, 928, 931, 932, 933, 934,
    936, 937, 943, 945, 947, 948, 949, 951, 953, 954, 957, 963, 965, 967, 980, 981, 983, 988,
]
SUBSET_CLASSES = {"imagenet-a": IMAGENET_A_CLASSES, "imagenet-r": IMAGENET_R_CLASSES}


def _transforms(resize: bool):
    from torchvision import transforms as T

    steps = [T.Resize(256), T.CenterCrop(224)] if resize else [T.CenterCrop(224)]
    return T.Compose(steps + [T.ToTensor()])


def _image_folder(path: Path, resize: bool, what: str):
    from torchvision.datasets import ImageFolder

    if not path.is_dir():
        raise DataError(f"missing {what} folder {path}")
    try:
        # allow_empty: a class folder without images (a subsampled copy) is not an error;
        # the class count, which fixes the label map, is checked by the callers.
        ds = ImageFolder(str(path), transform=_transforms(resize), allow_empty=True)
    except (FileNotFoundError, RuntimeError) as exc:
        first = str(exc).splitlines()[0]
        raise DataError(f"{path}: {first[:200]}{'…' if len(first) > 200 else ''}") from None
    if len(ds) == 0:
        raise DataError(f"{path} holds no images (expected <class>/<image> files)")
    return ds


def open_imagenet_c(root: Path, corruption: str, severity: int) -> ItemBatchSource:
    """``<root>/<corruption>/<severity>/<wnid>/*.JPEG``."""
    if not 1 <= severity <= 5:
        raise DataError(f"severity must be 1..5, not {severity}")
    ds = _image_folder(root / corruption / str(severity), resize=False, what="ImageNet-C")
    if len(ds.classes) != 1000:
        raise DataError(f"{root / corruption / str(severity)} has {len(ds.classes)} class folders; ImageNet-C has 1000")
    return ItemBatchSource(ds)


def open_imagenet_clean(root: Path) -> ItemBatchSource:
    """The ImageNet validation set in ``<wnid>/*.JPEG`` folders: ``<root>/val`` or ``<root>/../val``."""
    for candidate in (root / "val", root.parent / "val"):
        if candidate.is_dir():
            return ItemBatchSource(_image_folder(candidate, resize=True, what="ImageNet validation"))
    raise DataError(f"domain 'clean' needs the ImageNet validation set as {root / 'val'} or {root.parent / 'val'} (<wnid>/*.JPEG)")


def open_imagenet_variant(root: Path, variant: str) -> tuple[ItemBatchSource, list[int] | None]:
    """ImageNet-R/-A (200 wnid folders, masked logits) or ImageNet-V2 (folders named 0..999)."""
    ds = _image_folder(root, resize=True, what=variant)
    if variant == "imagenet-v2":
        try:
            index_of_folder = [int(c) for c in ds.classes]
        except ValueError:
            raise DataError(f"{root}: ImageNet-V2 folders must be named by class index 0..999") from None
        ds.target_transform = index_of_folder.__getitem__  # ImageFolder sorts '0','1','10',…: map back
        return ItemBatchSource(ds), None
    mask = SUBSET_CLASSES[variant]
    if len(ds.classes) != len(mask):
        raise DataError(f"{root} has {len(ds.classes)} class folders; {variant} has {len(mask)}")
    return ItemBatchSource(ds), mask
