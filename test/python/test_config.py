"""Configuration: defaults, file, environment overrides, errors that name the key."""
import dataclasses
import tomllib

import pytest

from servers import REPO
from MSUnmerged import lfn
from MSUnmerged.config import DEFAULT_CONFIG, Config, ConfigError, load_config
from MSUnmerged.worker.paths import MAX_LFN, problem


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
    # Above the worker's own limit (worker.paths.MAX_LFN): such lines would be planned, then refused at the site.
    ("[planner]\nmax_lfn_length = %d\n" % (MAX_LFN + 1), {}, "planner.max_lfn_length"),
    ("", {"MSUNMERGED_PLANNER__MAX_LFN_LENGTH": "65536"}, "planner.max_lfn_length"),
    ("[planner]\nmax_lfn_length = 63\n", {}, "planner.max_lfn_length"),
    # Above the worker's own floor (worker.paths.MIN_DIR_DEPTH, 5): /store/unmerged/<x> would be planned removable.
    ("[planner]\ndir_floor_depth = 4\n", {}, "planner.dir_floor_depth"),
    ("[guards]\nmax_delete_fraction = 1.5\n", {}, "guards.max_delete_fraction"),
    ("[service]\ndry_run = 'maybe'\n", {}, "service.dry_run"),
    ("", {"MSUNMERGED_SERVICE__DRY_RUN": "perhaps"}, "service.dry_run"),
    ("", {"MSUNMERGED_JOBS__BACKEND": "pbs"}, "jobs.backend"),
    ("[jobs]\nsubmit_batch = 0\n", {}, "jobs.submit_batch"),
    ("[jobs]\nlocal_nice = 20\n", {}, "jobs.local_nice"),
    ("", {"MSUNMERGED_JOBS__LOCAL_NICE": "-1"}, "jobs.local_nice"),
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
    ("[service]\nstats_reuse_s = -1\n", {}, "service.stats_reuse_s"),
    ("", {"MSUNMERGED_SERVICE__STATS_REUSE_S": "soon"}, "service.stats_reuse_s"),
    ("", {"MSUNMERGED_MONGO__URL": "mongodb://user:pw@"}, "mongo.url"),
    ("", {"MSUNMERGED_MONGO__URL": "localhost:27017"}, "mongo.url"),
    ("", {"MSUNMERGED_MONGO__URL": "mongodb://h:99999/"}, "mongo.url"),
    ("", {"MSUNMERGED_MONGO__URL": "mongodb+srv://cluster"}, "mongo.url"),
    ("[jobs.sites.T2_XX_A]\nexclude = ['logs/prod']\n", {}, "jobs.sites.T2_XX_A.exclude[0]"),
    ("[jobs.sites.T2_XX_A]\ninclude = ['/store/unmerged/a', 'b']\n", {}, "jobs.sites.T2_XX_A.include[1]"),
    ("[jobs.sites.T2_XX_A]\nmax_in_flight = -1\n", {}, "jobs.sites.T2_XX_A.max_in_flight"),
    ("[jobs.sites.T2_XX_A]\nmax_ops_per_s = 'fast'\n", {}, "jobs.sites.T2_XX_A.max_ops_per_s"),
    ("[jobs.sites.T2_XX_A]\nlook_before_delete = 'no thanks'\n", {}, "jobs.sites.T2_XX_A.look_before_delete"),
    ("[jobs.sites.T2_XX_A]\nmax_files_per_cycle = 30000000\n", {}, "jobs.sites.T2_XX_A.max_files_per_cycle"),
    ("", {"MSUNMERGED_PLANNER__MAX_FILES_PER_CYCLE": "-5"}, "planner.max_files_per_cycle"),
    ("[planner]\nmax_files_per_cycle = 1000\n[guards]\nmax_delete_files = 999\n", {},
     "planner.max_files_per_cycle"),
    ("", {"MSUNMERGED_JOBS__MAX_IN_FLIGHT": "-1"}, "jobs.max_in_flight"),
    ("", {"MSUNMERGED_JOBS__MAX_OPS_PER_S": "-0.5"}, "jobs.max_ops_per_s"),
    ("", {"MSUNMERGED_JOBS__TOP_UP_S": "0"}, "jobs.top_up_s"),
    # Every cycle re-checks the waiting jobs: a bound shorter than a cycle lets every job that waits one expire.
    ("[service]\ninterval_s = 7200\n[jobs]\nmax_protection_age_s = 3600\n", {}, "jobs.max_protection_age_s"),
    ("", {"MSUNMERGED_JOBS__MAX_PROTECTION_AGE_S": "600"}, "jobs.max_protection_age_s"),
    ("[rest]\nrequest_deadline_s = 0\n", {}, "rest.request_deadline_s"),
    ("[rest]\nthread_pool = 16\nmax_requests_per_caller = 16\n", {}, "rest.max_requests_per_caller"),
    ("[rest]\nmax_streams_per_caller = 9\n", {}, "rest.max_streams_per_caller"),
    ("[rest]\ncaller_requests_per_s = 0\n", {}, "rest.caller_requests_per_s"),
    ("[rest]\naudit_log_max_bytes = 100\n", {}, "rest.audit_log_max_bytes"),
    ("[rest]\nmax_connections_per_client = 0\n", {}, "rest.max_connections_per_client"),
    ("[rest]\ndb_dead_s = 5\n", {}, "rest.db_dead_s"),
    # An RSE document keeps its last 10 events (config.EVENTS_KEPT): more repeats could never be counted.
    ("[alerts]\nguard_repeats = 11\n", {}, "alerts.guard_repeats"),
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


@pytest.mark.parametrize("section, key, value", [
    ("service", "log_level", "debug"),  # any case: the logging set-up upper-cases it
    ("mongo", "url", "mongodb://a:b@h1:27017,h2:27017/?replicaSet=rs0"),
    ("mongo", "url", "mongodb+srv://cluster0.example.cern.ch/"),
])
def test_good_log_levels_and_mongo_urls_are_taken_as_given(tmp_path, section, key, value):
    (tmp_path / "none.toml").touch()
    cfg = load_config(tmp_path / "none.toml", env={f"MSUNMERGED_{section.upper()}__{key.upper()}": value})
    assert getattr(getattr(cfg, section), key) == value


def test_the_longest_line_the_planner_takes_the_worker_takes(tmp_path):
    """planner.max_lfn_length may reach the worker's MAX_LFN (bytes vs characters: never more characters)."""
    (tmp_path / "none.toml").touch()
    cfg = load_config(tmp_path / "none.toml", env={"MSUNMERGED_PLANNER__MAX_LFN_LENGTH": str(MAX_LFN)})
    longest = "/store/unmerged/" + "é" * ((MAX_LFN - 16) // 2)  # two UTF-8 bytes a character
    longest += "a" * (MAX_LFN - len(longest.encode()))
    line, reason = lfn.classify_line(longest.encode(), cfg.planner.max_lfn_length)
    assert reason is None and line == longest.encode() and problem(longest) is None
    assert lfn.classify_line(longest.encode() + b"a", cfg.planner.max_lfn_length)[1] == lfn.TOO_LONG
    ascii_over = "/store/unmerged/" + "a" * (MAX_LFN - 15)  # one past the limit: refused by both
    assert problem(ascii_over) is not None and lfn.classify_line(ascii_over.encode(), MAX_LFN)[1] == lfn.TOO_LONG


def test_site_specific_layout_with_its_root(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[jobs.sites.T2_XX_A]\npfn_layout = 'site_specific'\nunmerged_root = 'root://se//disk/tmp/'\n"
                    "[condor]\ndelegate_proxy = false\n")
    cfg = load_config(path, env={})
    assert cfg.jobs.for_rse("T2_XX_A").unmerged_root == "root://se//disk/tmp/" and cfg.condor.delegate_proxy is False


def test_per_rse_limits_and_filters(tmp_path):
    """jobs.sites.<RSE> overrides the service-wide limits where it sets them; its path filters add to the
    planner's (excludes join, includes narrow: component-wise)."""
    from MSUnmerged.sitelimits import intersect, limits_for
    path = tmp_path / "c.toml"
    path.write_text("[planner]\nmax_files_per_cycle = 500000\ninclude = ['/store/unmerged/Run3', '/store/unmerged/x/y']\n"
                    "[jobs]\nmax_in_flight = 50\nmax_ops_per_s = 20.0\n"
                    "[jobs.sites.T2_CH_CERN]\nmax_in_flight = 5\nlook_before_delete = false\nremove_empty_dirs = true\n"
                    "exclude = ['/store/unmerged/logs/wmagent', '/store/unmerged/SAM']\n"
                    "include = ['/store/unmerged/Run3/A', '/store/unmerged/x']\n")
    cfg = load_config(path, env={})
    cern, other = limits_for(cfg, "T2_CH_CERN"), limits_for(cfg, "T2_DE_DESY")
    assert (cern.max_in_flight, cern.max_ops_per_s, cern.max_files_per_cycle) == (5, 20.0, 500000)
    assert cern.look_before_delete is False and cern.remove_empty_dirs is True
    assert (other.max_in_flight, other.look_before_delete, other.remove_empty_dirs) == (50, True, False)
    assert cern.include == ("/store/unmerged/Run3/A", "/store/unmerged/x/y")
    assert other.include == ("/store/unmerged/Run3", "/store/unmerged/x/y")
    assert "/store/unmerged/SAM" in cern.exclude and "/store/unmerged/logs/prod/" in cern.exclude
    assert "/store/unmerged/SAM" not in other.exclude
    assert intersect(["/store/unmerged/a/b"], ["/store/unmerged/ab"]) == []  # component-wise, not by characters
    assert intersect(["/"], ["/store/unmerged/a//"]) == ["/store/unmerged/a"]


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
