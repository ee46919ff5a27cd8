"""``paddle.dataset.movielens``: MovieLens 1M (``ml-1m.zip``) in ``DATA_HOME/movielens``;
each rating is user features + movie features + the rating scaled to [-3, 5]."""

from __future__ import annotations

import functools
import re
import zipfile

import numpy as np

from . import common

__all__ = ["train", "test", "get_movie_title_dict", "max_movie_id", "max_user_id",
           "age_table", "movie_categories", "max_job_id", "user_info", "movie_info",
           "fetch", "convert"]

URL = "http://files.grouplens.org/datasets/movielens/ml-1m.zip"
MD5 = "c4d9eecfca2ab87c1945afe126590906"

age_table = (1, 18, 25, 35, 45, 50, 56)  # Paddle's list; a tuple reads the same


class MovieInfo:
    """A movie: id, categories and title words."""

    def __init__(self, index, categories, title):
        self.index = int(index)
        self.categories = categories
        self.title = title

    def value(self, categories_dict=None, title_dict=None):
        """[id, category ids, title word ids] (the dictionaries of the cached file)."""
        if categories_dict is None or title_dict is None:
            meta = _meta()
            categories_dict, title_dict = meta.categories, meta.titles
        return [self.index, [categories_dict[c] for c in self.categories],
                [title_dict[w.lower()] for w in self.title.split()]]

    def __str__(self):
        return f"<MovieInfo id({self.index}), title({self.title}), categories({self.categories})>"

    __repr__ = __str__


class UserInfo:
    """A user: id, gender, age bucket (index into ``age_table``) and job id."""

    def __init__(self, index, gender, age, job_id):
        self.index = int(index)
        self.is_male = gender == "M"
        self.age = age_table.index(int(age))
        self.job_id = int(job_id)

    def value(self):
        return [self.index, 0 if self.is_male else 1, self.age, self.job_id]

    def __str__(self):
        return (f"<UserInfo id({self.index}), gender({'M' if self.is_male else 'F'}), "
                f"age({age_table[self.age]}), job({self.job_id})>")

    __repr__ = __str__


class _Meta:
    def __init__(self, movies, titles, categories, users):
        self.movies, self.titles, self.categories, self.users = movies, titles, categories, users


def _lines(package: zipfile.ZipFile, name: str, path: str):
    try:
        data = package.read(name)
    except KeyError:
        raise common.DatasetFileError(f"{path}: the archive has no file {name!r}") from None
    return data.decode("latin").splitlines()


def _meta(path: str | None = None) -> _Meta:
    """Movies, users and the title-word and category dictionaries, read from the archive
    at each call (graphc keeps no module state; the files are small)."""
    path = path or common.download(URL, "movielens", MD5)
    pattern = re.compile(r"^(.*)\((\d+)\)$")
    movies, title_words, categories = {}, {}, {}
    with common.reading(path, "the ml-1m archive"), zipfile.ZipFile(path) as package:
        for lineno, line in enumerate(_lines(package, "ml-1m/movies.dat", path), 1):
            fields = line.strip().split("::")
            match = pattern.match(fields[1]) if len(fields) == 3 else None
            if match is None:
                raise common.DatasetFileError(f"{path}:ml-1m/movies.dat:{lineno}: expected "
                                              "'id::title (year)::genre|genre'")
            cats = fields[2].split("|")
            for c in cats:
                categories.setdefault(c, len(categories))
            title = match.group(1)
            movies[int(fields[0])] = MovieInfo(index=fields[0], categories=cats, title=title)
            for w in title.split():
                title_words.setdefault(w.lower(), len(title_words))
        users = {}
        for lineno, line in enumerate(_lines(package, "ml-1m/users.dat", path), 1):
            fields = line.strip().split("::")
            if len(fields) != 5:
                raise common.DatasetFileError(f"{path}:ml-1m/users.dat:{lineno}: expected "
                                              "'id::gender::age::job::zip'")
            users[int(fields[0])] = UserInfo(index=fields[0], gender=fields[1], age=fields[2],
                                             job_id=fields[3])
    return _Meta(movies, title_words, categories, users)


def __reader__(rand_seed=0, test_ratio=0.1, is_test=False):
    path = common.download(URL, "movielens", MD5)
    meta = _meta(path)
    # the draws np.random.seed(rand_seed); np.random.random() make in Paddle, without
    # touching numpy's global generator
    rng = np.random.RandomState(rand_seed)
    with common.reading(path, "the ml-1m archive"), zipfile.ZipFile(path) as package:
        for lineno, line in enumerate(_lines(package, "ml-1m/ratings.dat", path), 1):
            if (rng.random_sample() < test_ratio) == is_test:
                fields = line.strip().split("::")
                if len(fields) != 4:
                    raise common.DatasetFileError(f"{path}:ml-1m/ratings.dat:{lineno}: "
                                                  "expected 'user::movie::rating::time'")
                uid, mov_id = int(fields[0]), int(fields[1])
                rating = float(fields[2]) * 2 - 5.0
                usr, mov = meta.users[uid], meta.movies[mov_id]
                yield usr.value() + mov.value(meta.categories, meta.titles) + [[rating]]


def __reader_creator__(**kwargs):
    return lambda: __reader__(**kwargs)


train = functools.partial(__reader_creator__, is_test=False)
test = functools.partial(__reader_creator__, is_test=True)


def get_movie_title_dict():
    """Title word (lower case) -> id."""
    return _meta().titles


def max_movie_id():
    return max(m.index for m in _meta().movies.values())


def max_user_id():
    return max(u.index for u in _meta().users.values())


def max_job_id():
    return max(u.job_id for u in _meta().users.values())


def movie_categories():
    """Category -> id."""
    return _meta().categories


def user_info():
    """User id -> UserInfo."""
    return _meta().users


def movie_info():
    """Movie id -> MovieInfo."""
    return _meta().movies


def fetch():
    common.download(URL, "movielens", MD5)


def convert(path):
    common.convert(path, train(), 1000, "movielens_train")
