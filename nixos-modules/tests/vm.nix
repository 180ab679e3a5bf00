# The NixOS VM test: the module boots (./vm-host.nix) with a stand-in model server (the fault
# tests' scripted model, which passes loopd's self-test: tests/appliance/test_stand_in_model.py);
# every role's unit reaches READY=1, loopd's container has only a loopback interface and cannot
# reach the model's TCP port, the tool runtime starts containers with no network even when asked
# for the host's, and `bxctl chat --say` gets the stand-in's reply through loopd and inferproxy.
{ pkgs, self }:
pkgs.testers.runNixOSTest {
  name = "boxmaker";

  nodes.machine = {
    imports = [ self.nixosModules.default ./vm-host.nix ];
    virtualisation.memorySize = 2048;
    virtualisation.diskSize = 4096;
  };

  testScript = { nodes, ... }: ''
    import json

    machine.wait_for_unit("stand-in-model.service")
    machine.wait_for_open_port(8080)
    machine.wait_for_unit("boxmaker-tools.service")  # brokerd's tool runtime
    machine.wait_for_file("/run/boxmaker/tools/podman.sock")
    for role in ["inferproxy", "memoryd", "brokerd", "loopd"]:
        machine.wait_for_unit(f"boxmaker-{role}.service")  # Type=notify: READY=1 arrived

    def container_pid(role):
        podman = (
            f"runuser -u boxmaker-{role} -- env HOME=/var/lib/boxmaker-podman/{role} "
            f"XDG_RUNTIME_DIR=/run/boxmaker-podman/{role} podman"
        )
        state = json.loads(machine.succeed(f"{podman} inspect boxmaker-{role}"))[0]["State"]
        return state["Pid"]

    with subtest("loopd's container has only lo and cannot reach the model server"):
        pid = container_pid("loopd")
        links = machine.succeed(f"nsenter -t {pid} -n ip -o link show").strip().splitlines()
        assert len(links) == 1 and ": lo:" in links[0], links
        machine.fail(f"nsenter -t {pid} -n ${pkgs.curl}/bin/curl -sS --max-time 5 http://127.0.0.1:8080/health")

    with subtest("inferproxy reaches the model server"):
        pid = container_pid("inferproxy")
        machine.succeed(f"nsenter -t {pid} -n ${pkgs.curl}/bin/curl -sS --max-time 5 http://127.0.0.1:8080/health")

    with subtest("the tool runtime has no network: a container it starts sees only lo"):
        links = machine.succeed(
            "runuser -u boxmaker-brokerd -- env HOME=/tmp podman --remote "
            "--url=unix:///run/boxmaker/tools/podman.sock run --rm --pull=never --network=host "
            "--entrypoint=/bin/ip localhost/boxmaker/toolkit@"
            "$(cat ${nodes.machine.services.boxmaker.images.toolkit}/digest) -o link show"
        ).strip().splitlines()
        assert len(links) == 1 and ": lo:" in links[0], links

    with subtest("a bxctl chat turn goes through loopd and inferproxy"):
        answer = machine.succeed("bxctl chat --socket /run/boxmaker/loop/loop.sock --say 'hello'")
        assert "ok: hello" in answer, answer  # the scripted model echoes the owner's words
  '';
}
