"""Configuration: defaults, file, environment overrides, errors that name the key."""
import dataclasses
import tomllib

import pytest

from servers import REPO
from MSUnmerged.config import DEFAULT_CONFIG, Config, ConfigError, load_config


def test_defaults_and_shipped_file_agree():
    assert load_config(DEFAULT_CONFIG, env={}) == Config()
    assert Config().service.dry_run is True


def test_file_and_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[planner]\nfiles_per_job = 10\nexclude = ["/store/unmerged/logs"]\n[guards]\nmax_delete_fraction = 0.5\n')
    cfg = load_config(path, env={"MSUNMERGED_SERVICE__DRY_RUN": "false", "MSUNMERGED_PLANNER__SKIP_RSES": "A, B",
                                 "MSUNMERGED_GUARDS__MAX_DELETE_FILES": "7"})
    assert cfg.planner.files_per_job == 10 and cfg.planner.exclude == ["/store/unmerged/logs"]
    assert cfg.guards.max_delete_fraction == 0.5 and cfg.guards.max_delete_files == 7
    assert cfg.service.dry_run is False and cfg.planner.skip_rses == ["A", "B"]


@pytest.mark.parametrize("text, env, key", [
    ("[planner]\nfiles_per_jobs = 3\n", {}, "planner.files_per_jobs"),
    ("[plannr]\n", {}, "plannr"),
    ("[planner]\nfiles_per_job = 0\n", {}, "planner.files_per_job"),
    ("[planner]\nfiles_per_job = 'many'\n", {}, "planner.files_per_job"),
    ("[planner]\nexclude = ['relative/x']\n", {}, "planner.exclude[0]"),
    ("[guards]\nmax_delete_fraction = 1.5\n", {}, "guards.max_delete_fraction"),
    ("[service]\ndry_run = 'maybe'\n", {}, "service.dry_run"),
    ("", {"MSUNMERGED_SERVICE__DRY_RUN": "perhaps"}, "service.dry_run"),
    ("", {"MSUNMERGED_JOBS__BACKEND": "pbs"}, "jobs.backend"),
    ("[jobs]\nsubmit_batch = 0\n", {}, "jobs.submit_batch"),
    ("[jobs.sites.T2_XX_A]\npfn_layout = 'anything'\n", {}, "jobs.sites.T2_XX_A.pfn_layout"),
    # site_specific needs the root its workers must find, canonical and not the storage's top.
    ("[jobs.sites.T2_XX_A]\npfn_layout = 'site_specific'\n", {}, "jobs.sites.T2_XX_A.unmerged_root"),
    ("[jobs.sites.T2_XX_A]\npfn_layout = 'site_specific'\nunmerged_root = 'root://se//'\n", {},
     "jobs.sites.T2_XX_A.unmerged_root"),
    ("[jobs.sites.T2_XX_A]\nunmerged_root = '/disk/tmp/../data/'\n", {}, "jobs.sites.T2_XX_A.unmerged_root"),
    ("[jobs.sites.T2_XX_A]\nunmerged_root = 'disk/tmp/'\n", {}, "jobs.sites.T2_XX_A.unmerged_root"),
    ("[condor]\ndelegate_proxy = 'sometimes'\n", {}, "condor.delegate_proxy"),
    ("[jobs.sites.T2_XX_A]\nsiet = 'T2_XX'\n", {}, "jobs.sites.T2_XX_A.siet"),  # misspelt: unknown key
    ("[jobs.sites.T2_XX_A]\nbackend = 'slrum'\n", {}, "jobs.sites.T2_XX_A.backend"),
    ("[jobs.sites]\nT2_XX_A = 'T2_XX'\n", {}, "jobs.sites.T2_XX_A"),
    ("", {"MSUNMERGED_SERVICE__NOPE": "1"}, "service.nope"),
    ("[service]\nlog_level = 'LOUD'\n", {}, "service.log_level"),
    ("", {"MSUNMERGED_MONGO__URL": "mongodb://user:pw@"}, "mongo.url"),
    ("", {"MSUNMERGED_MONGO__URL": "localhost:27017"}, "mongo.url"),
    ("", {"MSUNMERGED_MONGO__URL": "mongodb://h:99999/"}, "mongo.url"),
    ("", {"MSUNMERGED_MONGO__URL": "mongodb+srv://cluster"}, "mongo.url"),
    ("[rest]\nrequest_deadline_s = 0\n", {}, "rest.request_deadline_s"),
    ("[rest]\nthread_pool = 16\nmax_connections_per_client = 16\n", {}, "rest.max_connections_per_client"),
    ("[rest]\nmax_connections_per_client = 0\n", {}, "rest.max_connections_per_client"),
    ("[rest]\ndb_dead_s = 5\n", {}, "rest.db_dead_s"),
])
def test_errors_name_the_key(tmp_path, text, env, key):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env=env)
    assert err.value.key == key and key in str(err.value)


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[planner\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})


def test_good_log_levels_and_mongo_urls(tmp_path):
    (tmp_path / "none.toml").touch()
    for env in ({"MSUNMERGED_SERVICE__LOG_LEVEL": "debug"},
                {"MSUNMERGED_MONGO__URL": "mongodb://a:b@h1:27017,h2:27017/?replicaSet=rs0"},
                {"MSUNMERGED_MONGO__URL": "mongodb+srv://cluster0.example.cern.ch/"}):
        assert load_config(tmp_path / "none.toml", env=env)


def test_site_specific_layout_with_its_root(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[jobs.sites.T2_XX_A]\npfn_layout = 'site_specific'\nunmerged_root = 'root://se//disk/tmp/'\n"
                    "[condor]\ndelegate_proxy = false\n")
    cfg = load_config(path, env={})
    assert cfg.jobs.for_rse("T2_XX_A").unmerged_root == "root://se//disk/tmp/" and cfg.condor.delegate_proxy is False


def test_the_shipped_file_documents_every_default() -> None:
    """etc/msunmerged.toml shows every key of every section with its default (tables are shown as examples)."""
    shipped = tomllib.loads((REPO / "etc" / "msunmerged.toml").read_text())
    text = (REPO / "etc" / "msunmerged.toml").read_text()
    defaults = Config()
    for section in dataclasses.fields(defaults):
        values = getattr(defaults, section.name)
        for key in dataclasses.fields(values):
            default = getattr(values, key.name)
            where = f"{section.name}.{key.name}"
            if isinstance(default, dict):
                assert f"[{where}." in text or f"[{where}]" in text, f"{where}: no example in etc/msunmerged.toml"
                continue
            assert key.name in shipped.get(section.name, {}), f"{where} is not in etc/msunmerged.toml"
            assert shipped[section.name][key.name] == default, f"{where}: the file shows another value"
