// SPDX-License-Identifier: Apache-2.0
// zeroshard-launch's rules, driven with made-up machine facts: the command it builds for several
// option combinations (exact argv), when it adds --allow-run-as-root and --oversubscribe, GPU
// placement and its errors, CPU binding, srun, hostfile parsing, and the command-line errors.
// The real launches (mpirun -n 2 of the self-test, env propagation) are job tests in CMakeLists.

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <fstream>
#include <map>

#include "common/test_util.h"
#include "common/error_text.h"
#include "zeroshard/base/error.h"
#include "zeroshard/launcher/launch.h"

namespace zl = zeroshard::launch;
namespace zs = zeroshard;

namespace {

using Args = std::vector<std::string>;

// A non-root 8-core node without GPUs, mpirun on PATH, outside Slurm; every program exists.
struct Fake {
  zl::MachineFacts facts;
  std::map<std::string, std::string> env;
  Fake() {
    facts.cores = 8;
    facts.mpirun = "/usr/bin/mpirun";
    facts.getenv = [this](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    facts.program_exists = [](const std::string& p) { return p != "missing-prog" && p != "./nope"; };
  }
  Fake(const Fake&) = delete;
};

std::string line_for(const Args& args, const zl::MachineFacts& facts) {
  return zl::shell_line(zl::build_plan(zl::parse_args(args), facts));
}

using zeroshard::test::contains;
using zeroshard::test::message_of;

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "zs_launcher_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(LaunchCommand, PlainMpirunBindsEachRankToItsShareOfCores) {
  Fake f;
  EXPECT_EQ(line_for({"-n", "2", "--", "prog", "--set", "a=b c"}, f.facts),
            "/usr/bin/mpirun -n 2 --map-by slot:PE=4 --bind-to core prog --set 'a=b c'");
  EXPECT_EQ(line_for({"-n", "8", "prog"}, f.facts), "/usr/bin/mpirun -n 8 --map-by slot:PE=1 --bind-to core prog");
  EXPECT_EQ(line_for({"-n", "3", "--cpus-per-rank", "2", "--map-by", "socket", "prog"}, f.facts),
            "/usr/bin/mpirun -n 3 --map-by socket:PE=2 --bind-to core prog");
  EXPECT_EQ(line_for({"--np=2", "--bind-to", "none", "prog"}, f.facts),
            "/usr/bin/mpirun -n 2 --map-by slot --bind-to none prog");
  EXPECT_EQ(line_for({"-np", "2", "--bind-to=socket", "prog"}, f.facts),
            "/usr/bin/mpirun -n 2 --map-by slot --bind-to socket prog");
}

TEST(LaunchCommand, RootGetsAllowRunAsRootOnlyWhenRoot) {
  Fake f;
  EXPECT_FALSE(contains(line_for({"-n", "2", "prog"}, f.facts), "--allow-run-as-root"));
  f.facts.is_root = true;
  zl::Plan p = zl::build_plan(zl::parse_args({"-n", "2", "prog"}), f.facts);
  EXPECT_EQ(zl::shell_line(p), "/usr/bin/mpirun -n 2 --allow-run-as-root --map-by slot:PE=4 --bind-to core prog");
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_TRUE(contains(p.notes[0], "root")) << p.notes[0];
}

TEST(LaunchCommand, OversubscribeOnlyBeyondTheCoresOrSlots) {
  Fake f;
  f.facts.cores = 2;
  EXPECT_FALSE(contains(line_for({"-n", "2", "prog"}, f.facts), "--oversubscribe"));
  zl::Plan p = zl::build_plan(zl::parse_args({"-n", "3", "prog"}), f.facts);
  EXPECT_EQ(zl::shell_line(p), "/usr/bin/mpirun -n 3 --oversubscribe --map-by slot --bind-to none prog");
  ASSERT_EQ(p.notes.size(), 2u);
  EXPECT_TRUE(contains(p.notes[0], "not bound")) << p.notes[0];
  EXPECT_TRUE(contains(p.notes[1], "3 rank(s) on this node's 2 core(s): added --oversubscribe")) << p.notes[1];
  // Binding asked for explicitly is kept, allowing the overload.
  EXPECT_EQ(line_for({"-n", "3", "--bind-to", "core", "prog"}, f.facts),
            "/usr/bin/mpirun -n 3 --oversubscribe --map-by slot:PE=1 --bind-to core:overload-allowed prog");

  // With a hostfile the slots count, not this node's cores.
  const std::string hosts = write_temp("hosts", "# two nodes\nnode1 slots=4\nnode2 slots=4 max_slots=8\n\n");
  EXPECT_EQ(line_for({"-n", "8", "--hostfile", hosts, "prog"}, f.facts),
            "/usr/bin/mpirun -n 8 --hostfile " + hosts + " --map-by slot:PE=1 --bind-to core prog");
  f.facts.cores = 8;
  EXPECT_EQ(line_for({"-n", "8", "--hostfile", hosts, "prog"}, f.facts),
            "/usr/bin/mpirun -n 8 --hostfile " + hosts + " --map-by slot:PE=2 --bind-to core prog");
  EXPECT_EQ(line_for({"-n", "9", "--hostfile", hosts, "prog"}, f.facts),
            "/usr/bin/mpirun -n 9 --hostfile " + hosts + " --oversubscribe --map-by slot --bind-to none prog");
  std::remove(hosts.c_str());
}

TEST(LaunchCommand, CpusPerRankMustFitTheNode) {
  Fake f;
  EXPECT_TRUE(contains(message_of<zs::UsageError>([&] { line_for({"-n", "4", "--cpus-per-rank", "3", "prog"}, f.facts); }),
                       "--cpus-per-rank 3 x 4 rank(s) per node needs 12 cores, but this node has 8"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>(
                           [&] { line_for({"-n", "2", "--cpus-per-rank", "2", "--bind-to", "none", "prog"}, f.facts); }),
                       "needs --bind-to core"));
}

TEST(LaunchCommand, GpusPerNodePlacesRanksAndSetsVisibleDevices) {
  Fake f;
  f.facts.gpus = 4;
  f.facts.gpu_probe = "nvidia-smi -L";
  EXPECT_EQ(line_for({"-n", "2", "--gpus-per-node", "2", "prog"}, f.facts),
            "/usr/bin/mpirun -n 2 --map-by ppr:2:node:PE=4 --bind-to core -x CUDA_VISIBLE_DEVICES=0,1 prog");
  // The user's CUDA_VISIBLE_DEVICES picks which GPUs.
  f.env["CUDA_VISIBLE_DEVICES"] = "2,3,1";
  EXPECT_EQ(line_for({"-n", "2", "--gpus-per-node", "2", "prog"}, f.facts),
            "/usr/bin/mpirun -n 2 --map-by ppr:2:node:PE=4 --bind-to core -x CUDA_VISIBLE_DEVICES=2,3 prog");
  EXPECT_TRUE(contains(message_of<zs::UsageError>([&] { line_for({"-n", "4", "--gpus-per-node", "4", "prog"}, f.facts); }),
                       "CUDA_VISIBLE_DEVICES='2,3,1' makes only 3 GPU(s) visible"));
  f.env.clear();
  // Two hosts of 4 slots at 4 GPUs per node: 8 ranks.
  const std::string hosts = write_temp("gpuhosts", "a slots=4\nb slots=4\n");
  EXPECT_EQ(line_for({"-n", "8", "--hostfile", hosts, "--gpus-per-node", "4", "prog"}, f.facts),
            "/usr/bin/mpirun -n 8 --hostfile " + hosts +
                " --map-by ppr:4:node:PE=2 --bind-to core -x CUDA_VISIBLE_DEVICES=0,1,2,3 prog");
  EXPECT_TRUE(contains(
      message_of<zs::UsageError>([&] { line_for({"-n", "9", "--hostfile", hosts, "--gpus-per-node", "4", "prog"}, f.facts); }),
      "-n 9 at 4 rank(s) per node (--gpus-per-node 4) needs 3 node(s), but the job has 2"));
  std::remove(hosts.c_str());
  EXPECT_TRUE(contains(message_of<zs::UsageError>([&] { line_for({"-n", "3", "--gpus-per-node", "2", "prog"}, f.facts); }),
                       "needs 2 node(s), but the job has 1 (no --hostfile: this node only)"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>(
                           [&] { line_for({"-n", "2", "--gpus-per-node", "2", "--map-by", "node", "prog"}, f.facts); }),
                       "--map-by cannot be combined with --gpus-per-node"));
}

TEST(LaunchCommand, MoreGpusThanTheNodeHasIsAnError) {
  Fake f;
  f.facts.gpus = 2;
  f.facts.gpu_probe = "/proc/driver/nvidia/gpus";
  EXPECT_EQ(message_of<zs::UsageError>([&] { line_for({"-n", "4", "--gpus-per-node", "4", "prog"}, f.facts); }),
            "--gpus-per-node 4 but this node has 2 GPU(s) (found by /proc/driver/nvidia/gpus); ask for at most 2 per "
            "node");
  f.facts.gpus = 0;
  f.facts.gpu_probe = "";
  const std::string msg = message_of<zs::UsageError>([&] { line_for({"-n", "1", "--gpus-per-node", "1", "prog"}, f.facts); });
  EXPECT_TRUE(contains(msg, "--gpus-per-node 1 but this node has no NVIDIA GPU (no nvidia-smi on PATH and no "
                            "/proc/driver/nvidia/gpus)")) << msg;
  // A login node may launch for GPU nodes when told to.
  EXPECT_EQ(line_for({"-n", "1", "--gpus-per-node", "1", "--skip-gpu-check", "prog"}, f.facts),
            "/usr/bin/mpirun -n 1 --map-by ppr:1:node:PE=8 --bind-to core -x CUDA_VISIBLE_DEVICES=0 prog");
}

TEST(LaunchCommand, EnvPropagation) {
  Fake f;
  f.env["NCCL_DEBUG"] = "INFO";
  EXPECT_EQ(line_for({"-n", "1", "--env", "NCCL_DEBUG", "-x", "A=1 2", "--env=B=", "prog"}, f.facts),
            "/usr/bin/mpirun -n 1 --map-by slot:PE=8 --bind-to core -x NCCL_DEBUG -x 'A=1 2' -x B= prog");
  EXPECT_EQ(message_of<zs::UsageError>([&] { line_for({"-n", "1", "--env", "UNSET_VAR", "prog"}, f.facts); }),
            "--env UNSET_VAR: UNSET_VAR is not set in this environment, so there is no value to pass; give --env "
            "UNSET_VAR=VALUE");
  EXPECT_TRUE(contains(message_of<zs::UsageError>([&] { zl::parse_args({"--env", "1X=2", "prog"}); }),
                       "'1X' is not a variable name"));
}

TEST(LaunchCommand, SrunInsideASlurmAllocation) {
  Fake f;
  f.facts.in_slurm = true;
  f.facts.slurm_ntasks = 4;
  f.facts.srun = "/usr/bin/srun";
  f.facts.gpus = 4;
  f.facts.gpu_probe = "nvidia-smi -L";
  zl::Plan p = zl::build_plan(zl::parse_args({"--gpus-per-node", "4", "--env", "X=a b", "--", "prog", "-v"}), f.facts);
  EXPECT_EQ(zl::shell_line(p), "env 'X=a b' /usr/bin/srun --ntasks=4 --ntasks-per-node=4 --gpus-per-node=4 prog -v");
  EXPECT_EQ(line_for({"-n", "8", "--cpus-per-rank", "2", "--bind-to", "core", "--map-by", "node", "prog"}, f.facts),
            "/usr/bin/srun --ntasks=8 --cpus-per-task=2 --cpu-bind=cores --distribution=cyclic --overcommit prog");
  // A hostfile means mpirun, even inside an allocation; --launcher srun with one is an error.
  const std::string hosts = write_temp("slurmhosts", "a slots=2\n");
  EXPECT_TRUE(contains(line_for({"-n", "2", "--hostfile", hosts, "prog"}, f.facts), "/usr/bin/mpirun -n 2 --hostfile"));
  EXPECT_TRUE(contains(
      message_of<zs::UsageError>([&] { line_for({"-n", "2", "--hostfile", hosts, "--launcher", "srun", "prog"}, f.facts); }),
      "--hostfile is for mpirun"));
  std::remove(hosts.c_str());
  EXPECT_TRUE(contains(line_for({"-n", "2", "--launcher", "mpirun", "prog"}, f.facts), "/usr/bin/mpirun -n 2"));
  f.facts.srun.clear();
  EXPECT_TRUE(contains(message_of<zs::Error>([&] { line_for({"-n", "2", "prog"}, f.facts); }),
                       "srun not found on PATH; --launcher srun needs Slurm's client commands"));
}

TEST(LaunchCommand, MissingLaunchersAndPrograms) {
  Fake f;
  f.facts.mpirun.clear();
  EXPECT_EQ(message_of<zs::Error>([&] { line_for({"-n", "2", "prog"}, f.facts); }),
            "mpirun not found on PATH; install Open MPI's launcher (Debian/Ubuntu: apt-get install openmpi-bin) or run "
            "inside a Slurm allocation with --launcher srun");
  // A dry run still shows the command, saying it will not run here.
  zl::Plan p = zl::build_plan(zl::parse_args({"-n", "2", "--dry-run", "prog"}), f.facts);
  EXPECT_EQ(p.argv.at(0), "mpirun");
  EXPECT_TRUE(contains(p.notes.at(0), "openmpi-bin"));
  f.facts.mpirun = "/usr/bin/mpirun";
  EXPECT_EQ(message_of<zs::UsageError>([&] { line_for({"-n", "2", "missing-prog"}, f.facts); }),
            "program 'missing-prog' is not found on PATH; give its path, e.g. build/bin/missing-prog");
  EXPECT_TRUE(contains(message_of<zs::UsageError>([&] { line_for({"-n", "2", "./nope"}, f.facts); }),
                       "program './nope' is not an executable file"));
  EXPECT_EQ(message_of<zs::UsageError>([&] { line_for({"prog"}, f.facts); }), "missing -n N (the number of ranks)");
}

TEST(LaunchArgs, ErrorsNameTheArgument) {
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--hostfle", "h", "prog"}); }),
                       "unknown option '--hostfle'; did you mean '--hostfile'?"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--gpus-per-nod=2", "prog"}); }),
                       "did you mean '--gpus-per-node'?"));
  EXPECT_FALSE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--zzzzzzzzzzzz", "prog"}); }), "did you mean"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "0", "prog"}); }), "-n must be at least 1, got 0"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "-3", "prog"}); }), "-n must be at least 1, got -3"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "two", "prog"}); }), "-n 'two' is not an integer"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "2x", "prog"}); }), "-n '2x' is not an integer"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "2"}); }), "no program to run"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "2", "--"}); }), "no program to run"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n"}); }), "-n needs a value"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--bind-to", "cores", "prog"}); }),
                       "--bind-to 'cores' is not one of core, socket, none"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--dry-run=yes", "prog"}); }),
                       "--dry-run takes no value (got '--dry-run=yes')"));
  // Every usage error ends with the usage line.
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "0", "prog"}); }),
                       "(usage: zeroshard-launch -n N [OPTIONS] [--] PROGRAM [ARGS...]; zeroshard-launch --help lists"));
  // --flag=value and --flag value alike; -np as mpirun spells it; the last repeat wins.
  EXPECT_EQ(zl::parse_args({"--np=3", "--hostfile=h", "prog"}).np, 3);
  EXPECT_EQ(zl::parse_args({"-np", "3", "prog"}).np, 3);
  EXPECT_EQ(zl::parse_args({"-n", "3", "-n", "4", "prog"}).np, 4);
  EXPECT_EQ(zl::parse_args({"--launcher-arg", "--mca", "--launcher-arg=x", "prog"}).launcher_args, (Args{"--mca", "x"}));
  EXPECT_TRUE(zl::parse_args({"--version"}).version);
  EXPECT_TRUE(zl::parse_args({"--help"}).help);
  // The program's own options are not ours, with or without `--`.
  zl::LaunchOptions o = zl::parse_args({"-n", "2", "prog", "--hostfle", "-n", "5"});
  EXPECT_EQ(o.program, (Args{"prog", "--hostfle", "-n", "5"}));
  EXPECT_EQ(o.np, 2);
}

TEST(Hostfile, ParsesHostsAndSlots) {
  auto hosts = zl::parse_hostfile_text("node1 slots=4  # comment\n\n  # only a comment\nnode2\nnode3 max_slots=2 slots=2\n",
                                       "hf");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "node2");
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(hosts[1].line, 4);
  EXPECT_EQ(hosts[2].slots, 2);
}

TEST(Hostfile, ErrorsNameFileAndLine) {
  auto err = [](const std::string& text) {
    return message_of<zs::ConfigError>([&] { zl::parse_hostfile_text(text, "hosts.txt"); });
  };
  EXPECT_EQ(err("a slots=2\nb slots=two\n"),
            "hosts.txt:2: slots='two' is not a count; expected a whole number >= 1, e.g. slots=8");
  EXPECT_EQ(err("a slots=0\n"), "hosts.txt:1: slots='0' is not a count; expected a whole number >= 1, e.g. slots=8");
  EXPECT_EQ(err("a\n\nb cpus=4\n"), "hosts.txt:3: unexpected 'cpus=4' after host 'b'; allowed: slots=K, max_slots=K");
  EXPECT_EQ(err("slots=4\n"),
            "hosts.txt:1: line starts with 'slots=4' but a hostfile line starts with a host name, e.g. \"node1 slots=8\"");
  EXPECT_EQ(err("a slots=2\na slots=2\n"),
            "hosts.txt:2: host 'a' is listed again; give each host one line with its total slots");
  EXPECT_EQ(err("a slots=4 max_slots=2\n"), "hosts.txt:1: max_slots=2 is below slots=4 for host 'a'");
  EXPECT_EQ(err("# nothing\n\n"), "hosts.txt: no host in the hostfile; write one \"HOST slots=K\" per line");
  EXPECT_TRUE(contains(message_of<zs::IoError>([] { zl::parse_hostfile("/nonexistent/hosts"); }),
                       "cannot read hostfile '/nonexistent/hosts': No such file or directory"));
  EXPECT_TRUE(contains(message_of<zs::IoError>([] { zl::parse_hostfile("/tmp"); }), "is a directory"));
}

TEST(ShellQuote, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(zl::shell_quote("build/bin/prog"), "build/bin/prog");
  EXPECT_EQ(zl::shell_quote("a=b,c:d"), "a=b,c:d");
  EXPECT_EQ(zl::shell_quote(""), "''");
  EXPECT_EQ(zl::shell_quote("it's $HOME"), "'it'\\''s $HOME'");
}

// The real node: whatever it has, the facts are sane and a plan for it builds.
TEST(DetectMachine, FactsOfThisNode) {
  zl::MachineFacts f = zl::detect_machine();
  EXPECT_GE(f.cores, 1);
  EXPECT_EQ(f.is_root, ::geteuid() == 0);
  EXPECT_FALSE(f.mpirun.empty()) << "mpirun is a build dependency (openmpi-bin)";
  EXPECT_TRUE(f.program_exists("sh"));
  EXPECT_FALSE(f.program_exists("/nonexistent/prog"));
  if (f.gpu_probe.empty()) EXPECT_EQ(f.gpus, 0);
  zl::LaunchOptions o = zl::parse_args({"-n", "1", "--launcher", "mpirun", "sh"});
  EXPECT_EQ(zl::build_plan(o, f).argv.at(0), f.mpirun);
}

TEST(LaunchRestarts, OptionsParseAndAJobWithoutResumeGetsANote) {
  const zl::LaunchOptions o = zl::parse_args({"-n", "2", "--max-restarts", "3", "--restart-delay", "0.5", "prog"});
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.restart_delay, 0.5);
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--max-restarts", "-1", "prog"}); }),
                       "--max-restarts"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--restart-delay", "x", "prog"}); }),
                       "--restart-delay"));
  Fake f;
  auto has_note = [](const zl::Plan& p) {
    for (const auto& n : p.notes) {
      if (contains(n, "no --resume=auto, so a restarted job starts again from step 0")) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_note(zl::build_plan(o, f.facts)));
  EXPECT_FALSE(has_note(zl::build_plan(zl::parse_args({"-n", "2", "--max-restarts", "3", "prog", "--resume=auto"}),
                                       f.facts)));
  EXPECT_FALSE(has_note(zl::build_plan(zl::parse_args({"-n", "2", "prog"}), f.facts)));
}

TEST(LaunchRestarts, MinRanksNeedsRestartsAndAtMostTheRanks) {
  EXPECT_EQ(zl::parse_args({"-n", "4", "--max-restarts", "2", "--min-ranks", "3", "prog"}).min_ranks, 3);
  EXPECT_EQ(zl::parse_args({"-n", "4", "--max-restarts", "2", "prog"}).min_ranks, 0);
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"-n", "4", "--min-ranks", "3", "prog"}); }),
                       "--min-ranks 3 says how far restarts may shrink the job; it needs --max-restarts N"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] {
                         zl::parse_args({"-n", "2", "--max-restarts", "1", "--min-ranks", "3", "prog"});
                       }),
                       "--min-ranks 3 exceeds -n 2"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] {
                         zl::parse_args({"-n", "2", "--max-restarts", "1", "--min-ranks", "0", "prog"});
                       }),
                       "--min-ranks"));
}

// A job command that cannot start (here: a script whose interpreter does not exist) is an error
// naming it and the reason; a launcher whose parent ignores SIGCHLD still waits for its job.
TEST(LaunchRestarts, AJobThatCannotStartIsAnErrorAndAnIgnoredSigchldIsReset) {
  const zs::test::RankDir dir("launch_cannot_start");
  const std::string script = dir.path + "/mpirun";
  {
    std::ofstream out(script);
    out << "#!/nonexistent/interpreter\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  zl::Plan plan;
  plan.argv = {script, "-n", "1", "true"};
  EXPECT_EQ(message_of<zs::IoError>([&] { zl::run_with_restarts(plan, 1, 0); }),
            "cannot start '" + script + "': No such file or directory (errno 2)");
  struct sigaction ignore {}, saved {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGCHLD, &ignore, &saved), 0);
  plan.argv = {"sh", "-c", "exit 0"};
  EXPECT_EQ(message_of<zs::Error>([&] { EXPECT_EQ(zl::run_with_restarts(plan, 0, 0), 0); }), "<no exception>");
  plan.argv = {"sh", "-c", "exit 7"};
  EXPECT_EQ(zl::run_with_restarts(plan, 0, 0), 7) << "the job's own status, read by waitpid";
  ::sigaction(SIGCHLD, &saved, nullptr);
}
