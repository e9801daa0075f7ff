# zsh -f zsh_complete.zsh FPATH_DIR OUT 'words typed': press TAB after the words in an
# interactive zsh (on a pseudo-terminal, compinit loaded from FPATH_DIR) and append to OUT
# every match zsh offers and every description line it shows. OUT.done appears when it is over.
zmodload zsh/zpty
zpty completing zsh -f -i
zpty -w completing "PS1=''; fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
# Every compadd writes its matches (-O) and its display strings (-d ARRAY) to OUT.
zpty -w completing "compadd() {
  local -a matches; builtin compadd -O matches \"\$@\"; print -rl -- \"\${matches[@]}\" >> $2
  local i; for ((i = 1; i < \$#; i++)); do
    [[ \${@[i]} == -d ]] && print -rl -- \"\${(@P)@[i+1]}\" >> $2
  done
  builtin compadd \"\$@\"
}"
# Type only once the line editor reads keys one by one (a ^U before would kill the line).
zpty -w completing "zle-line-init() { print -r -- ready > $2.ready }; zle -N zle-line-init"
for i in {1..300}; do [[ -e $2.ready ]] && break; sleep 0.1; done
zpty -w -n completing "$3"$'\t\x05\x15'  # TAB, then end of line and kill it
zpty -w completing "print -r -- done > $2.done"
for i in {1..300}; do [[ -e $2.done ]] && break; sleep 0.1; done
zpty -d completing
